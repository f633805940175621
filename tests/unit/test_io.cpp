// HDF5 round trips of the model and dataset files, and the never-overwrite rule.
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error.hpp"
#include "data/passkey.hpp"
#include "io/atomic.hpp"
#include "io/dataset_file.hpp"
#include "io/model_file.hpp"
#include "io/run_dir.hpp"
#include "sys/stop.hpp"
#include "model/init.hpp"

namespace lct {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lct_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

Provenance prov() {
  Provenance p;
  p.version = "test";
  p.config = {{"", "threads", int64_t(2), ""}, {"init", "seed", int64_t(5), ""}};
  return p;
}

using ModelFile = TempDir;

TEST_F(ModelFile, RoundTripIsBitExactForTiedAndUntied) {
  for (bool tied : {false, true}) {
    ModelConfig c = model_preset("tiny");
    c.tie_word_embeddings = tied;
    c.rope_theta = 500000.0;
    const ParamLayout layout = ParamLayout::llama(c);
    Buffer<float> w(layout.total);
    llama_init(layout, c, 9, w.data());
    const std::string file = path(tied ? "tied.h5" : "untied.h5");
    write_model_file(file, c, layout, w.data(), prov(), false);
    const ModelData m = read_model_file(file);
    EXPECT_EQ(m.config.rope_theta, 500000.0);
    EXPECT_EQ(m.config.tie_word_embeddings, tied);
    EXPECT_EQ(m.config.hidden_size, c.hidden_size);
    ASSERT_EQ(m.layout.total, layout.total);
    for (const TensorSpec& t : layout.tensors)
      for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(m.params[t.offset + i], w[t.offset + i]) << t.name;
  }
}

TEST_F(ModelFile, NeverOverwritesUnlessForcedAndLeavesNoTemporaryFile) {
  const ModelConfig c = model_preset("tiny");
  const ParamLayout layout = ParamLayout::llama(c);
  Buffer<float> w(layout.total);
  const std::string file = path("m.h5");
  { std::ofstream(file) << "precious"; }
  EXPECT_THROW(write_model_file(file, c, layout, w.data(), prov(), false), Error);
  std::ifstream in(file);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "precious");
  write_model_file(file, c, layout, w.data(), prov(), true);
  EXPECT_NO_THROW(read_model_file(file));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);  // no .tmp-* left behind
  EXPECT_THROW(write_model_file(path("no/such/dir/m.h5"), c, layout, w.data(), prov(), false), Error);
}

using DatasetFile = TempDir;

TEST_F(DatasetFile, RoundTripKeepsTokensOffsetsAndPasskeyAnswers) {
  const TokenDataset ds = make_passkey_dataset({12, 256, 4, 77});
  const std::string file = path("d.h5");
  write_dataset_file(file, ds, prov(), false);
  const TokenDataset r = read_dataset_file(file);
  EXPECT_EQ(r.tokens, ds.tokens);
  EXPECT_EQ(r.doc_offsets, ds.doc_offsets);
  EXPECT_EQ(r.vocab_size, ds.vocab_size);
  EXPECT_EQ(r.tokenizer, "byte");
  EXPECT_EQ(r.bos_id, ds.bos_id);
  EXPECT_EQ(r.pad_id, ds.pad_id);
  EXPECT_EQ(r.source, ds.source);
  EXPECT_EQ(r.passkey.answer_offset, ds.passkey.answer_offset);
  EXPECT_EQ(r.passkey.answer_length, ds.passkey.answer_length);
  EXPECT_EQ(r.passkey.depth, ds.passkey.depth);
}

TEST_F(DatasetFile, ReadingAModelAsADatasetSaysWhatTheFileIs) {
  const ModelConfig c = model_preset("tiny");
  const ParamLayout layout = ParamLayout::llama(c);
  Buffer<float> w(layout.total);
  write_model_file(path("m.h5"), c, layout, w.data(), prov(), false);
  try {
    read_dataset_file(path("m.h5"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is an lctrain model file, not a dataset file"),
              std::string::npos) << e.what();
  }
}

using Atomic = TempDir;

// Two writers of one file in one process (or in two processes of one pid on two hosts of
// a shared file system) must not share a temporary file: the name carries the host, the
// pid and random bits.
TEST_F(Atomic, TwoWritersOfOneFileGetDifferentTemporaryNames) {
  const AtomicTarget a(path("x.h5"), false, "file"), b(path("x.h5"), false, "file");
  EXPECT_NE(a.temp_path(), b.temp_path());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_NE(a.temp_path().find(std::string(".tmp-") + host + "-" + std::to_string(::getpid()) + "-"),
            std::string::npos)
      << a.temp_path();
}

void write_text(const std::string& file, const std::string& text) {
  std::ofstream(file) << text;
}
std::string read_text(const std::string& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two writers started together both pass the existence check at their start; the final step
// must then let only the first one succeed (without --force), and the second fail naming the
// file, with the first one's file intact and no temporary file left behind.
TEST_F(Atomic, OfTwoWritersStartedTogetherOnlyTheFirstCommitsWithoutForce) {
  {
    AtomicTarget a(path("x.h5"), false, "model file"), b(path("x.h5"), false, "model file");
    write_text(a.temp_path(), "first");
    write_text(b.temp_path(), "second");
    a.commit();
    try {
      b.commit();
      FAIL() << "the second writer replaced the first one's file";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model file '" + path("x.h5") + "' appeared while"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_text(path("x.h5")), "first");
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);  // no temporary file left
  // --force still replaces.
  AtomicTarget c(path("x.h5"), true, "model file");
  write_text(c.temp_path(), "third");
  c.commit();
  EXPECT_EQ(read_text(path("x.h5")), "third");
}

// A launcher sent SIGTERM (Open MPI's mpirun) stops reading its ranks' output and kills them
// a second later; rank 0 blocked writing a line to it would never write its checkpoint. A
// child writes lines into a pipe nobody reads, as rank 0 does; after SIGTERM its writes must
// give up within the grace so that it reaches its stop (here: exit 85).
TEST(StopAwareStdout, AStopEndsAWriteTheReaderNeverTakes) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string line(200, 'x');
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 1);
    install_stop_handlers();
    std::cout.rdbuf(stop_aware_stdout());
    while (stop_signal() == 0) std::cout << line << std::endl;  // blocks once the pipe is full
    std::cout << "stopping" << std::endl;
    ::_exit(85);
  }
  ::close(fds[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // 64 KiB fill in well under that
  ::kill(child, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ::close(fds[0]);
      FAIL() << "the writer was still blocked 5 s after SIGTERM";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 85);
  EXPECT_LT(took, 1.0);  // the grace (0.2 s) and a poll slice, well inside mpirun's 1 s
}

using RunDir = TempDir;

// --force sets a previous run aside whole or not at all. Here the timing table's new name
// fits the system's limit and a checkpoint's does not: nothing may move (the table used to
// move and the checkpoints stay, splitting the run).
TEST_F(RunDir, SettingAsideIsAllOrNothingWhenANameWouldBeTooLong) {
  fs::path deep = fs::absolute(dir_);
  const size_t target = PATH_MAX - 1 - std::string("/replaced-YYYYmmdd-HHMMSS/checkpoints/step_00000004.h5").size() + 2;
  while (deep.string().size() + 201 < target) deep /= std::string(199, 'd');
  deep /= std::string(target - deep.string().size() - 1, 'e');
  ASSERT_EQ(deep.string().size(), target);
  RunDirectory run(deep.string());
  std::ofstream(deep / "timing.h5") << "t";
  std::ofstream(deep / "checkpoints" / "step_00000004.h5") << "c";
  try {
    run.set_aside_previous_run();
    FAIL() << "set aside a run into names past the limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing was moved"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(deep / "timing.h5"));
  EXPECT_TRUE(fs::exists(deep / "checkpoints" / "step_00000004.h5"));
  for (const auto& e : fs::directory_iterator(deep))
    EXPECT_EQ(e.path().filename().string().rfind("replaced-", 0), std::string::npos) << e.path();
  // The up-front check of train counts the same names.
  EXPECT_GE(RunDirectory::longest_name(deep.string()), size_t(PATH_MAX));
}

}  // namespace
}  // namespace lct
