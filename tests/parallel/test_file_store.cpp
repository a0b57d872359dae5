// FileStore: set/get/check/add/wait semantics in one process, timeouts that name the key, keys
// that are not file names, and add() staying atomic across concurrently forked processes.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "test_util.h"
#include "parallel/fork_ranks.h"
#include "parallel/temp_dir.h"

#include <kiln/parallel/file_store.h>

using namespace kiln;
using namespace std::chrono_literals;

TEST_CASE("set, get, check and add") {
  test::TempDir tmp("kiln_file_store");
  const std::string& dir = tmp.path;
  auto a = dist::make_file_store(dir, 2);
  auto b = dist::make_file_store(dir, 2);
  CHECK_FALSE(b->check("alpha"));
  a->set("alpha", std::string("one"));
  CHECK(b->check("alpha"));
  CHECK(b->get_string("alpha") == "one");
  a->set("alpha", std::string("two"));  // overwrite
  CHECK(b->get_string("alpha") == "two");
  a->set("empty", dist::Bytes{});
  CHECK(b->get("empty").empty());
  dist::Bytes binary = {0, 255, 10, 0, 7};
  a->set("group/x y%z", binary);  // not a file name: encoded
  CHECK(b->get("group/x y%z") == binary);
  CHECK_FALSE(b->check("group"));
  CHECK(a->add("counter", 5) == 5);
  CHECK(b->add("counter", -2) == 3);
  CHECK(a->get_string("counter") == "3");
  a->set("text", std::string("abc"));
  CHECK_ERROR_CONTAINS(a->add("text", 1), "text", "abc", "not an integer");
  a.reset();
  b.reset();  // the last of the two stores removes the directory
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("get and wait time out naming the missing keys") {
  test::TempDir tmp("kiln_file_store");
  const std::string& dir = tmp.path;
  auto s = dist::make_file_store(dir, 1);
  s->set_timeout(200ms);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_ERROR_CONTAINS(s->get("never"), "\"never\"", "200 ms");
  CHECK(std::chrono::steady_clock::now() - t0 >= 200ms);
  s->set("here", std::string("1"));
  CHECK_ERROR_CONTAINS(s->wait({"here", "gone/1", "gone/2"}, 100ms), "\"gone/1\", \"gone/2\"", "100 ms");
  s->wait({"here"}, 100ms);
}

TEST_CASE("wait returns once another process sets the key") {
  test::TempDir tmp("kiln_file_store");
  const std::string& dir = tmp.path;
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto s = dist::make_file_store(dir, 2);
    ::usleep(150000);
    s->set("late", std::string("ok"));
    ::_exit(0);
  }
  auto s = dist::make_file_store(dir, 2);
  s->set_timeout(10s);
  CHECK(s->get_string("late") == "ok");
  int st = 0;
  ::waitpid(pid, &st, 0);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  s.reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("add is atomic across processes") {
  test::TempDir tmp("kiln_file_store");
  const std::string& dir = tmp.path;
  const int procs = 4, adds = 200;
  const std::vector<int> codes = test::fork_ranks(procs, [&](int) {
    auto s = dist::make_file_store(dir, procs + 1);
    for (int k = 0; k < adds; ++k) s->add("n", 1);
    return 0;
  });
  for (int code : codes) CHECK(code == 0);
  auto s = dist::make_file_store(dir, procs + 1);
  CHECK(s->get_string("n") == std::to_string(procs * adds));
  s.reset();
  CHECK_FALSE(std::filesystem::exists(dir));
}
