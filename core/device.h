// Where a tensor lives: the CPU or one CUDA device.
#pragma once

#include <ostream>
#include <string>

namespace kiln {

/// The kinds of device a tensor can live on.
enum class DeviceType : uint8_t { CPU, CUDA };

/// A device: its type and, for CUDA, the device index.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return Device{DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return Device{DeviceType::CUDA, index}; }

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;

  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

/// Prints str(): "cpu" or "cuda:0".
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln
