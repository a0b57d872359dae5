// make_job_store (job_store.h): the worker's side of who hosts the rendezvous store.
#include <kiln/parallel/job_store.h>

#include <cstdlib>
#include <string_view>

namespace kiln::dist {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool agent_hosts_store() {
  const std::string v = env_or_empty("TORCHELASTIC_USE_AGENT_STORE");
  return v == "True" || v == "true" || v == "1";
}

}  // namespace

std::shared_ptr<Store> make_job_store(const EnvInfo& env, Millis timeout) {
  const bool agent = agent_hosts_store();
  auto store = make_tcp_store(TCPStoreOptions()
                                  .host(env.master_addr)
                                  .port(static_cast<uint16_t>(env.master_port))
                                  .is_server(env.rank == 0 && !agent)
                                  .timeout(timeout));
  store->set_timeout(timeout);
  if (!agent) return store;
  // torchrun's workers use "/worker/attempt_<restart>"; kiln-run names the generation.
  std::string prefix = env_or_empty("KILN_STORE_PREFIX");
  if (prefix.empty()) prefix = "/worker/attempt_" + env_or_empty("TORCHELASTIC_RESTART_COUNT");
  auto view = make_prefix_store(prefix, store);
  view->set_timeout(timeout);
  return view;
}

std::string advertised_address() { return env_or_empty("KILN_LOCAL_ADDR"); }

}  // namespace kiln::dist
