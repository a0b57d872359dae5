// The search for cuDNN's run-time compiler and driver (cudnn_runtime_libs.h). A library loaded here
// by its full path stays loaded (never closed), and glibc's dlopen matches later requests by soname,
// so cuDNN's own dlopen("libnvrtc.so.13") gets this copy.
#include <kiln/core/cuda/runtime/cudnn_runtime_libs.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <filesystem>
#include <vector>

namespace kiln::cuda {

namespace {

namespace fs = std::filesystem;

// The soname cuDNN asks for: libnvrtc.so.<major of the CUDA runtime it runs with>.
std::string nvrtc_soname() { return "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000); }

// The directory libcudnn.so was loaded from ("" when unknown).
fs::path cudnn_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  fs::path p = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname).parent_path() : p.parent_path();
}

// Where a wheel environment or the build's toolkit keeps libnvrtc, in search order.
std::vector<fs::path> nvrtc_directories() {
  std::vector<fs::path> dirs;
  const fs::path cudnn = cudnn_directory();
  if (!cudnn.empty()) {
    dirs.push_back(cudnn);                                           // a toolkit install: side by side
    dirs.push_back(cudnn.parent_path().parent_path() / "cuda_nvrtc" / "lib");  // nvidia/cudnn/lib -> nvidia/cuda_nvrtc/lib
    dirs.push_back(cudnn.parent_path().parent_path() / "cu13" / "lib");        // CUDA 13 wheels: nvidia/cu13/lib
  }
#ifdef KILN_CUDA_TOOLKIT_LIBRARY_DIR
  dirs.emplace_back(KILN_CUDA_TOOLKIT_LIBRARY_DIR);
#endif
  return dirs;
}

std::string joined(const std::vector<fs::path>& dirs) {
  std::string s;
  for (const fs::path& d : dirs) s += (s.empty() ? "" : ", ") + d.string();
  return s.empty() ? "(none)" : s;
}

// Loads libnvrtc; true when found. `searched` gets the directories tried after the library path.
bool load_nvrtc(std::string& searched) {
  const std::string soname = nvrtc_soname();
  const std::vector<fs::path> dirs = nvrtc_directories();
  searched = joined(dirs);
  if (dlopen(soname.c_str(), RTLD_NOW | RTLD_GLOBAL)) return true;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    const fs::path candidate = d / soname;
    if (fs::exists(candidate, ec) && dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL)) return true;
  }
  return false;
}

std::string find_problem() {
  std::string problem;
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL))
    problem += "libcuda.so.1 (the driver) cannot be loaded; ";
  std::string searched;
  if (!load_nvrtc(searched))
    problem += nvrtc_soname() + " was found neither on the library path nor in " + searched + "; ";
  if (problem.empty()) return problem;
  problem.resize(problem.size() - 2);
  return "cuDNN compiles these engines at run time with NVRTC and loads them through the driver: " + problem +
         ". Put the directory holding it on LD_LIBRARY_PATH (pip: site-packages/nvidia/cuda_nvrtc/lib or "
         "nvidia/cu13/lib), or set KILN_ATTENTION=kiln";
}

}  // namespace

const std::string& cudnn_runtime_compiler_problem() {
  static const std::string problem = find_problem();  // thread-safe, once
  return problem;
}

std::string cudnn_runtime_prerequisite_message() {
  const std::string& problem = cudnn_runtime_compiler_problem();
  if (!problem.empty()) return problem;
  return "cuDNN reports a missing run-time prerequisite: " + nvrtc_soname() +
         " and libcuda.so.1 must be on the library path; both load here, so check that they match the CUDA " +
         std::to_string(CUDART_VERSION / 1000) + " runtime cuDNN was built for, or set KILN_ATTENTION=kiln";
}

}  // namespace kiln::cuda
