#include "bindings/sampling_params.h"

#include <pybind11/stl.h>

#include <string>
#include <vector>

namespace py = pybind11;

namespace ls {

SamplingParams sampling_from_dict(const py::dict& d, bool strict) {
  SamplingParams p;
  for (const auto& item : d) {
    const std::string key = py::cast<std::string>(item.first);
    const py::handle v = item.second;
#define LS_DICT_SAMPLING_FIELD(type, name, dflt) \
    if (key == #name) {                          \
      if (!v.is_none()) p.name = v.cast<type>(); \
      continue;                                  \
    }
    LS_SAMPLING_SCALARS(LS_DICT_SAMPLING_FIELD)
#undef LS_DICT_SAMPLING_FIELD
    if (key == "seed") {
      p.has_seed = !v.is_none();
      p.seed = p.has_seed ? v.cast<uint64_t>() : 0;
    } else if (key == "ignore_eos") {
      if (!v.is_none()) p.ignore_eos = v.cast<bool>();
    } else if (key == "logit_bias") {
      if (v.is_none()) continue;
      if (py::isinstance<py::dict>(v)) {
        for (const auto& kv : v.cast<py::dict>())
          p.logit_bias.emplace_back(kv.first.cast<int32_t>(), kv.second.cast<float>());
      } else {
        p.logit_bias = v.cast<std::vector<std::pair<int32_t, float>>>();
      }
    } else if (strict) {
      throw py::key_error("unknown sampling parameter: " + key);
    }
  }
  return p;
}

}  // namespace ls
