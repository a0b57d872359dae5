// FileStore: a Store over a directory every rank can see (one machine, or a shared filesystem),
// like c10d's FileStore. It needs no server, so single-node tests and `--spawn` benchmarks can
// rendezvous without a TCP port.
#pragma once

#include <memory>
#include <string>

#include <kiln/parallel/store.h>

namespace kiln::dist {

/// Keys are files under `path` (created when absent). set publishes by atomic rename, so a reader
/// sees a whole value or none; add serialises on a per-key flock; get/wait poll with short sleeps
/// and fail after the store's timeout naming the key. When all `world_size` stores made on `path`
/// have been destroyed, the last one removes the key files.
std::shared_ptr<Store> make_file_store(const std::string& path, int world_size);

}  // namespace kiln::dist
