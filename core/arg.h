// KILN_ARG: one line per field of an options struct, as torch C++'s TORCH_ARG. In a struct,
//   KILN_ARG(int64_t, batch_size) = 512;  // what it means
// declares the field `batch_size_` (public, read as options.batch_size_) with its default, the
// fluent setter `batch_size(v)` that returns the struct, so DataLoaderOptions().batch_size(64)
// chains, and the getter `batch_size()`. Setters that check or convert their value are written
// out by hand instead.
#pragma once

#define KILN_ARG(T, name)                          \
  auto& name(const T& new_##name) {                \
    name##_ = new_##name;                          \
    return *this;                                  \
  }                                                \
  const T& name() const noexcept { return name##_; } \
  T name##_
