#include <stdexcept>

#include "lane/backend.h"

namespace ls::lane {

static const char kSyntheticPrefix[] = "synthetic:";

std::unique_ptr<Backend> make_backend(const std::string& path, int threads) {
  if (path.rfind(kSyntheticPrefix, 0) == 0) return make_synthetic_backend(path.substr(sizeof(kSyntheticPrefix) - 1));
  (void)threads;
  // The engine (csrc/engine) is not linked yet; engine_backend.cpp replaces this branch.
  throw std::runtime_error("cannot load '" + path + "': the inference engine is not built into this runtime");
}

std::vector<std::string> backend_names() { return {"synthetic"}; }

}  // namespace ls::lane
