// PrefixStore: a view of another store whose keys live under "<prefix>/", so several process
// groups (or a group and its sub-groups) can share one TCP store without their keys colliding.
#include <kiln/core/error.h>
#include <kiln/parallel/store.h>

namespace kiln::dist {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store)
      : prefix_(std::move(prefix) + "/"), store_(std::move(store)) {
    timeout_ = store_->timeout();
  }

  void set(const std::string& key, const Bytes& value) override { store_->set(prefix_ + key, value); }

  // Waits with this store's timeout (set_timeout on the view applies), then reads.
  Bytes get(const std::string& key) override {
    store_->wait({prefix_ + key}, timeout_);
    return store_->get(prefix_ + key);
  }

  int64_t add(const std::string& key, int64_t delta) override { return store_->add(prefix_ + key, delta); }
  bool check(const std::string& key) override { return store_->check(prefix_ + key); }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    store_->wait(full, timeout);
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> store) {
  KILN_CHECK(store != nullptr, "make_prefix_store(\"", prefix, "\"): the underlying store is null");
  return std::make_shared<PrefixStore>(std::move(prefix), std::move(store));
}

}  // namespace kiln::dist
