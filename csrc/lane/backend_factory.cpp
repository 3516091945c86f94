#include "lane/backend.h"

namespace ls::lane {

static const char kSyntheticPrefix[] = "synthetic:";

std::unique_ptr<Backend> make_backend(const std::string& path, const BackendOptions& opts) {
  if (path.rfind(kSyntheticPrefix, 0) == 0)
    return make_synthetic_backend(path.substr(sizeof(kSyntheticPrefix) - 1), opts);
  return make_engine_backend(path, opts);
}

std::vector<std::string> backend_names() { return {"synthetic", "engine"}; }

}  // namespace ls::lane
