// read_env and launched(): the rank, world size and master address a launcher (kiln-run, torchrun,
// srun, mpirun) hands a process through environment variables, and whether there is one. Kept
// apart from init.cpp so they can be tested without a store.
#include <kiln/parallel/init.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include <kiln/core/error.h>

namespace kiln::dist {
namespace {

constexpr const char* kHowToLaunch =
    "run under kiln-run or torchrun (which set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), "
    "or under srun / mpirun with MASTER_ADDR and MASTER_PORT exported";

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int parse_int(const char* name, const char* text) {
  int value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  KILN_CHECK_DIST(ec == std::errc() && ptr == end, "environment variable ", name, "=\"", text,
                  "\" is not an integer");
  return value;
}

int require_int(const char* name) {
  const char* v = get(name);
  KILN_CHECK_DIST(v != nullptr, "environment variable ", name, " is not set: ", kHowToLaunch);
  return parse_int(name, v);
}

// KILN_DIST_TIMEOUT: positive seconds (a decimal fraction is allowed), else the default.
Millis timeout_from_env() {
  const char* v = get("KILN_DIST_TIMEOUT");
  if (v == nullptr) return kDefaultTimeout;
  char* end = nullptr;
  const double seconds = std::strtod(v, &end);
  KILN_CHECK_DIST(end != v && *end == '\0' && seconds > 0 && seconds < 1e9, "environment variable KILN_DIST_TIMEOUT=\"",
                  v, "\" is not a positive number of seconds");
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000.0 + 0.5)));
}

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
};

constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
};

// The first launcher (in kLaunchers' order) whose rank variable is set, or null.
const Launcher* find_launcher() {
  for (const auto& l : kLaunchers)
    if (get(l.rank) != nullptr) return &l;
  return nullptr;
}

}  // namespace

bool launched() {
  const Launcher* launcher = find_launcher();
  if (launcher == nullptr) return false;
  // A one-task step with no rendezvous address (a batch script running the program itself) is a
  // lone process; anything else is a rank, and read_env reports what it lacks.
  const char* size = get(launcher->size);
  return get("MASTER_ADDR") != nullptr || size == nullptr || std::string_view(size) != "1";
}

EnvInfo read_env(const InitOptions& options) {
  EnvInfo info;
  const Launcher* launcher = find_launcher();
  if (options.rank_ >= 0 && options.world_size_ >= 1) {
    info.rank = options.rank_;
    info.world_size = options.world_size_;
    info.launcher = "options";
  } else {
    KILN_CHECK_DIST(launcher != nullptr,
                    "environment variable RANK is not set (nor SLURM_PROCID or OMPI_COMM_WORLD_RANK): ", kHowToLaunch);
    info.launcher = launcher->name;
    info.rank = options.rank_ >= 0 ? options.rank_ : require_int(launcher->rank);
    info.world_size = options.world_size_ >= 1 ? options.world_size_ : require_int(launcher->size);
  }
  const char* local = launcher != nullptr ? get(launcher->local_rank) : nullptr;
  info.local_rank = local != nullptr ? parse_int(launcher->local_rank, local) : info.rank;
  KILN_CHECK(info.world_size >= 1, "world size must be >= 1, got ", info.world_size);
  KILN_CHECK(info.rank >= 0 && info.rank < info.world_size, "rank ", info.rank, " is not in [0, ", info.world_size,
             ") (launcher: ", info.launcher, ")");
  KILN_CHECK(info.local_rank >= 0, "local rank must be >= 0, got ", info.local_rank);

  if (!options.master_addr_.empty()) {
    info.master_addr = options.master_addr_;
  } else {
    const char* addr = get("MASTER_ADDR");
    KILN_CHECK_DIST(addr != nullptr, "environment variable MASTER_ADDR is not set: ", kHowToLaunch);
    info.master_addr = addr;
  }
  info.master_port = options.master_port_ >= 0 ? options.master_port_ : require_int("MASTER_PORT");
  info.timeout = options.timeout_.count() > 0 ? options.timeout_ : timeout_from_env();
  const char* blocking = get("KILN_NCCL_BLOCKING_WAIT");
  info.nccl_blocking_wait = blocking != nullptr && std::string_view(blocking) == "1";
  KILN_CHECK(info.master_port >= 1 && info.master_port <= 65535, "MASTER_PORT ", info.master_port,
             " is not a TCP port (1..65535)");
  return info;
}

}  // namespace kiln::dist
