// The slower tiers of activation and optimizer offload: blocks and arrays come back as they
// went, on disk and on a NUMA node; a tier without room is refused when it is made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <vector>

#include "common/error.hpp"
#include "sys/tier_array.hpp"
#include "sys/tier_store.hpp"

namespace lct {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("lct_tier_" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

// Saves 5 blocks of an odd size, overwrites the memory, loads them back in another order
// (some while saves are still queued), and compares every byte.
void round_trip(const TierSpec& spec) {
  constexpr size_t kBytes = 1000003;
  constexpr int kBlocks = 5;
  TierStore store(spec, kBytes, kBlocks, "--test-tier");
  std::vector<std::vector<uint8_t>> mem(kBlocks, std::vector<uint8_t>(kBytes));
  for (int b = 0; b < kBlocks; ++b)
    for (size_t i = 0; i < kBytes; ++i) mem[size_t(b)][i] = uint8_t((i * 31 + size_t(b) * 7) % 251);
  const auto want = mem;
  for (int b = 0; b < kBlocks; ++b) store.save(b, mem[size_t(b)].data(), kBytes);
  store.wait_all();
  for (auto& m : mem) std::fill(m.begin(), m.end(), 0);
  TierStore::Ticket last = 0;
  for (int b : {3, 0, 4, 1, 2}) last = store.load(b, mem[size_t(b)].data(), kBytes);
  store.wait(last);
  EXPECT_EQ(mem, want);
  EXPECT_EQ(store.bytes_moved(), 2 * kBlocks * kBytes);
}

TEST(TierStore, BlocksComeBackBitForBitOnDisk) {
  TempDir d;
  round_trip(TierSpec::parse(d.path.string(), "--test-tier"));
  EXPECT_TRUE(fs::is_empty(d.path));  // the file has no name, before and after
}

TEST(TierStore, BlocksComeBackBitForBitOnNumaNodeZero) { round_trip(TierSpec::parse("numa:0", "--test-tier")); }

TEST(TierStore, ADiskWithoutRoomIsRefusedWhenTheTierIsMade) {
  TempDir d;
  const TierSpec spec = TierSpec::parse(d.path.string(), "--test-tier");
  try {
    TierStore store(spec, size_t(1) << 40, 1 << 16, "--test-tier");  // 64 PiB
    FAIL() << "a tier larger than the disk was made";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--test-tier '" + d.path.string() + "': needs "), std::string::npos) << m;
    EXPECT_NE(m.find("free space there, choose another directory, or offload less"), std::string::npos) << m;
  }
  EXPECT_TRUE(fs::is_empty(d.path));
}

// The optimizer's tier: written in chunks that are then dropped from memory, read back in
// another order, every value as written; it starts at zero, like the in-memory moments.
void array_round_trip(const TierSpec& spec) {
  constexpr size_t kN = 3 * 1048576 + 17;  // not a whole number of pages
  TierArray a(spec, kN, "--test-tier");
  float* p = a.data();
  EXPECT_EQ(std::count(p, p + kN, 0.0f), ptrdiff_t(kN));
  for (size_t c0 = 0; c0 < kN; c0 += 1000003) {
    const size_t c1 = std::min(kN, c0 + 1000003);
    a.ahead(c1, std::min(kN, c1 + 1000003));
    for (size_t i = c0; i < c1; ++i) p[i] = float(i) * 0.5f;
    a.done(c0, c1);
  }
  a.flush();
  for (size_t i = kN; i-- > 0;)
    if (p[i] != float(i) * 0.5f) FAIL() << "element " << i << " is " << p[i];
}

TEST(TierArray, ValuesSurviveBeingWrittenBackAndDroppedOnDisk) {
  TempDir d;
  array_round_trip(TierSpec::parse(d.path.string(), "--test-tier"));
  EXPECT_TRUE(fs::is_empty(d.path));
}

TEST(TierArray, ValuesStayOnNumaNodeZero) { array_round_trip(TierSpec::parse("numa:0", "--test-tier")); }

TEST(TierArray, ADiskWithoutRoomIsRefused) {
  TempDir d;
  EXPECT_THROW(TierArray(TierSpec::parse(d.path.string(), "--test-tier"), size_t(1) << 60, "--test-tier"), Error);
  EXPECT_TRUE(fs::is_empty(d.path));
}

TEST(TierSpec, ParsesAtTheDoor) {
  EXPECT_FALSE(TierSpec::parse("", "--x").on());
  EXPECT_EQ(TierSpec::parse("numa:0", "--x").describe(), "NUMA node 0");
  EXPECT_THROW(TierSpec::parse("numa:", "--x"), Error);
  EXPECT_THROW(TierSpec::parse("numa:-1", "--x"), Error);
  EXPECT_THROW(TierSpec::parse("/no/such/dir", "--x"), Error);
}

}  // namespace
}  // namespace lct
