// The store a rank of a job rendezvouses through, chosen from its launcher's variables: under
// kiln-run's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True, as torchrun sets it) a client of
// the agent's store under this generation's prefix (KILN_STORE_PREFIX); otherwise the classic
// store that rank 0 serves at MASTER_ADDR:MASTER_PORT.
#pragma once

#include <memory>
#include <string>

#include <kiln/parallel/init.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {

std::shared_ptr<Store> make_job_store(const EnvInfo& env, Millis timeout);

/// The address this rank's node should advertise to its peers when its launcher chose one
/// (KILN_LOCAL_ADDR, set by kiln-run's elastic agent); empty when it did not.
std::string advertised_address();

}  // namespace kiln::dist
