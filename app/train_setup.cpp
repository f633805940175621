#include "app/train_setup.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "common/error.hpp"

namespace lct {

std::string gib(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", bytes / double(1u << 30));
  return s;
}

// Everything that can be checked before any rank allocates or writes anything.
void check_inputs(const TrainOptions& o, const ModelConfig& mc, const TokenDataset& ds, int64_t cp) {
  check_fits_model(ds, o.data, mc.vocab_size, o.model);
  if (o.seq_len < 2) fail("--seq-len ", o.seq_len, " is too short: it must be at least 2");
  if (o.batch_size < 1 || o.grad_accum < 1 || o.steps < 1)
    fail("--batch-size, --grad-accum and --steps must be at least 1");
  if (o.block_q < 1 || o.block_k < 1) fail("--block-q and --block-k must be at least 1");
  if (o.keep_checkpoints < 2)
    fail("--keep-checkpoints ", o.keep_checkpoints, " must be at least 2, so that a damaged ",
         "newest checkpoint always leaves a complete one to resume from");
  if (o.keep_every < 0 || o.max_skips < 1 || o.comm_timeout < 0 || o.time_limit < 0)
    fail("--keep-every, --comm-timeout and --time-limit must be >= 0 and --max-skips >= 1");
  if (cp > 1 && o.seq_len % (2 * cp) != 0)
    fail("--seq-len ", o.seq_len, " is not divisible by 2 x cp = ", 2 * cp,
         ": the zigzag split cuts every sequence into 2 x cp equal chunks; use a multiple, e.g. ",
         (o.seq_len / (2 * cp) + 1) * 2 * cp);
  if (o.resume != "none" && o.resume != "auto" && !std::filesystem::exists(o.resume))
    fail("--resume checkpoint '", o.resume, "' does not exist; give a checkpoint file, or auto");
  const int64_t real = int64_t(ds.tokens.size());
  if (real < o.seq_len)
    fail("dataset '", o.data, "' holds ", real, " tokens, fewer than one sequence of --seq-len ",
         o.seq_len, "; use a shorter --seq-len or more data");
}

// Degrees from the flags: dp = 0 takes what cp leaves of the world.
std::pair<int64_t, int64_t> degrees(const TrainOptions& o, int world) {
  if (o.cp < 1) fail("--cp ", o.cp, " must be at least 1");
  if (o.dp < 0) fail("--dp ", o.dp, " must be at least 1 (or 0 for world size / cp)");
  const int64_t dp = o.dp > 0 ? o.dp : std::max<int64_t>(1, world / o.cp);
  return {dp, o.cp};
}

std::string latest_or_none(const RunDirectory* run) {
  const std::string p = run ? run->latest() : "";
  return p.empty() ? "none written yet" : "'" + p + "'";
}

void Fault::maybe_fire(int my_rank, int64_t now) const {
  if (my_rank != rank || now != step) return;
  if (kind == "throw") throw std::runtime_error("injected fault (LCT_INJECT_FAULT)");
  if (kind == "exit") std::_Exit(3);
  if (kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

Fault injected_fault() {
  Fault f;
  if (const char* v = std::getenv("LCT_INJECT_FAULT")) {
    char kind[16] = "";
    long long step = -1;
    if (std::sscanf(v, "%15[a-z]:%d:%lld", kind, &f.rank, &step) != 3 ||
        (std::string(kind) != "throw" && std::string(kind) != "hang" && std::string(kind) != "exit"))
      fail("LCT_INJECT_FAULT='", v, "' must be KIND:RANK:STEP with KIND throw, hang or exit");
    f.kind = kind;
    f.step = step;
  }
  return f;
}

}  // namespace lct
