// DistributedDataParallel construction (same model on every rank, rank 0's weights everywhere)
// and the per-forward buffer broadcast; the gradient path is the Reducer's.
#include <kiln/parallel/ddp.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include <kiln/autograd/grad_mode.h>
#include <kiln/core/factory.h>
#include <kiln/parallel/debug_level.h>

namespace kiln::dist {

namespace {

// One line per parameter and buffer: "<kind>\t<name>\t<dtype>\t<requires_grad>\t<shape>". A
// parameter frozen on one rank only would give the ranks different buckets (and collectives that
// do not pair up), so requires_grad is part of the fingerprint.
struct Entry {
  std::string kind, name, dtype, grad, shape;
  bool operator==(const Entry&) const = default;
};

std::string describe(const nn::NamedTensors& params, const nn::NamedTensors& buffers) {
  std::ostringstream os;
  for (const auto* list : {&params, &buffers})
    for (const auto& [name, t] : *list)
      os << (list == &params ? "parameter" : "buffer") << '\t' << name << '\t' << t.dtype() << '\t'
         << (t.requires_grad() ? "true" : "false") << '\t' << t.shape() << '\n';
  return os.str();
}

std::vector<Entry> parse(const std::string& text) {
  std::vector<Entry> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    Entry e;
    std::istringstream ls(line);
    std::getline(ls, e.kind, '\t');
    std::getline(ls, e.name, '\t');
    std::getline(ls, e.dtype, '\t');
    std::getline(ls, e.grad, '\t');
    std::getline(ls, e.shape);
    out.push_back(e);
  }
  return out;
}

// FNV-1a: the same text gives the same fingerprint on every rank.
int64_t fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  int64_t out;
  std::memcpy(&out, &h, sizeof(out));
  return out;
}

// The first difference between rank 0's entries and rank r's, as a sentence.
std::string first_difference(const std::vector<Entry>& ref, const std::vector<Entry>& other, int r) {
  std::ostringstream os;
  size_t n = std::min(ref.size(), other.size());
  for (size_t k = 0; k < n; ++k) {
    const Entry &a = ref[k], &b = other[k];
    if (a.kind != b.kind || a.name != b.name)
      os << "entry " << k << ": rank " << r << " has " << b.kind << " '" << b.name << "' where rank 0 has " << a.kind
         << " '" << a.name << "'";
    else if (a.shape != b.shape)
      os << "rank " << r << " has '" << b.name << "' of shape " << b.shape << " where rank 0 has " << a.shape;
    else if (a.dtype != b.dtype)
      os << "rank " << r << " has '" << b.name << "' of dtype " << b.dtype << " where rank 0 has " << a.dtype;
    else if (a.grad != b.grad)
      os << "rank " << r << " has " << b.kind << " '" << b.name << "' with requires_grad=" << b.grad
         << " where rank 0 has requires_grad=" << a.grad
         << " (freeze the same parameters on every rank before wrapping the model)";
    else
      continue;
    return os.str();
  }
  if (ref.size() > other.size())
    os << "rank " << r << " has " << other.size() << " parameters and buffers where rank 0 has " << ref.size()
       << "; the first one rank " << r << " lacks is " << ref[n].kind << " '" << ref[n].name << "'";
  else
    os << "rank " << r << " has " << other.size() << " parameters and buffers where rank 0 has " << ref.size()
       << "; the first extra one is " << other[n].kind << " '" << other[n].name << "'";
  return os.str();
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  KILN_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  KILN_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  KILN_CHECK(options_.bucket_cap_mb_ > 0 && options_.first_bucket_cap_mb_ > 0,
             "DistributedDataParallel: bucket caps must be positive, got bucket_cap_mb ", options_.bucket_cap_mb_,
             " and first_bucket_cap_mb ", options_.first_bucket_cap_mb_);
  verify_same_model_across_ranks();

  std::vector<Tensor> params, state;
  std::vector<std::string> names;
  for (auto& [name, p] : module_->named_parameters()) {
    state.push_back(p);
    if (!p.requires_grad()) continue;  // frozen: broadcast, never reduced
    params.push_back(p);
    names.push_back(name);
  }
  for (auto& [name, b] : module_->named_buffers()) state.push_back(b);
  broadcast_from_rank0(state);

  reducer_ = Reducer::create(std::move(params), std::move(names), group_,
                             ReducerOptions()
                                 .first_bucket_cap_bytes(mib_to_bytes(options_.first_bucket_cap_mb_))
                                 .bucket_cap_bytes(mib_to_bytes(options_.bucket_cap_mb_))
                                 .gradient_as_bucket_view(options_.gradient_as_bucket_view_)
                                 .find_unused_parameters(options_.find_unused_parameters_)
                                 .static_graph(options_.static_graph_)
                                 .rebuild_buckets(options_.rebuild_buckets_)
                                 .order_check(options_.order_check_));
  if (debug_level() != DebugLevel::off) {  // INFO and DETAIL: torch logs its DDP setup too
    std::ostringstream os;
    int64_t elements = 0;
    for (const Bucket& b : reducer_->buckets()) {
      os << (elements ? ", " : "") << b.numel;
      elements += b.numel;
    }
    std::fprintf(stderr,
                 "kiln: DistributedDataParallel rank %d/%d on %s: %zu parameters (%lld elements) in %zu buckets "
                 "[%s], find_unused_parameters=%d static_graph=%d gradient_as_bucket_view=%d broadcast_buffers=%d\n",
                 group_->rank(), group_->size(), group_->backend().c_str(), reducer_->parameters().size(),
                 static_cast<long long>(elements), reducer_->bucket_count(), os.str().c_str(),
                 int(options_.find_unused_parameters_), int(options_.static_graph_),
                 int(options_.gradient_as_bucket_view_), int(options_.broadcast_buffers_));
  }
}

// All-gather (count, fingerprint); only on a mismatch are the full descriptions exchanged (lengths,
// then the padded bytes), so the error can name the first differing parameter.
void DistributedDataParallel::verify_same_model_across_ranks() {
  const int size = group_->size();
  auto params = module_->named_parameters();
  auto buffers = module_->named_buffers();
  std::string text = describe(params, buffers);
  // Collectives run on the group's device; the host reads the results back.
  const Device dev = group_->device();
  Tensor mine = from_vector(std::vector<int64_t>{int64_t(params.size() + buffers.size()), fingerprint(text)}, {2}).to(dev);
  Tensor all = zeros({2 * int64_t(size)}, TensorOptions(DType::i64).device(dev));
  group_->allgather(all, mine)->wait();
  std::vector<int64_t> prints = all.to_vector<int64_t>();
  bool same = true;
  for (int r = 1; r < size; ++r) same = same && prints[2 * r] == prints[0] && prints[2 * r + 1] == prints[1];
  if (same) return;

  Tensor len = from_vector(std::vector<int64_t>{int64_t(text.size())}, {1}).to(dev);
  Tensor lens = zeros({int64_t(size)}, TensorOptions(DType::i64).device(dev));
  group_->allgather(lens, len)->wait();
  std::vector<int64_t> lengths = lens.to_vector<int64_t>();
  int64_t longest = 1;
  for (int64_t l : lengths) longest = std::max(longest, l);
  Tensor bytes = zeros({longest}, DType::u8);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  bytes = bytes.to(dev);
  Tensor gathered = zeros({longest * size}, TensorOptions(DType::u8).device(dev));
  group_->allgather(gathered, bytes)->wait();
  gathered = gathered.to(Device::cpu());
  const char* base = static_cast<const char*>(gathered.data_ptr());
  std::vector<Entry> ref = parse(std::string(base, size_t(lengths[0])));
  for (int r = 1; r < size; ++r) {
    std::vector<Entry> other = parse(std::string(base + r * longest, size_t(lengths[r])));
    const bool differs = other != ref;
    KILN_CHECK_DIST(!differs, "DistributedDataParallel: the model differs across ranks: ",
                    first_difference(ref, other, r), " (every rank must build the same model before wrapping it)");
  }
}

// Launches one broadcast per tensor from `root`, then waits for them all.
void DistributedDataParallel::broadcast_from(const std::vector<Tensor>& tensors, int root) {
  if (group_->size() == 1) return;
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Tensor> targets;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    KILN_CHECK(t.is_contiguous(), "DistributedDataParallel: a parameter or buffer of shape ", t.shape(),
               " is not contiguous; rank 0's values cannot be broadcast into it");
    Tensor target = t.detach();
    targets.push_back(target);
    works.push_back(group_->broadcast(targets.back(), root));
  }
  for (auto& w : works) w->wait();
}

void DistributedDataParallel::prepare_forward() {
  int root = 0;
  if (join_) {  // Note [Join]
    JoinHeader h = exchange_join_header(/*active=*/true);
    KILN_CHECK_DIST(!h.terminate, "DistributedDataParallel::join: at least one rank exhausted its inputs "
                                  "(throw_on_early_termination); throwing on every rank");
    if (!join_->divide_by_initial_world_size_) reducer_->set_div_factor(h.active);
    root = h.first_active;
  }
  if (!options_.broadcast_buffers_) return;
  broadcast_from(module_->buffers(), root);
}

}  // namespace kiln::dist
