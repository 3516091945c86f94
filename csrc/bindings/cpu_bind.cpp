#include "bindings/bindings.h"
#include "common/cpu_features.h"

namespace py = pybind11;

namespace ls {

void bind_cpu(py::module_& m) {
  m.def("cpu_features", [] {
    const CpuFeatures& f = cpu_features();
    py::dict usable, advertised;
    usable["avx2"] = f.avx2;
    usable["avx512"] = f.avx512;
    usable["avx512_vnni"] = f.avx512_vnni;
    usable["avx_vnni"] = f.avx_vnni;
    usable["amx_int8"] = f.amx_int8;
    advertised["avx2"] = f.adv_avx2;
    advertised["fma"] = f.adv_fma;
    advertised["f16c"] = f.adv_f16c;
    advertised["avx512f"] = f.adv_avx512f;
    advertised["avx512bw"] = f.adv_avx512bw;
    advertised["avx512vl"] = f.adv_avx512vl;
    advertised["avx512_vnni"] = f.adv_avx512_vnni;
    advertised["avx_vnni"] = f.adv_avx_vnni;
    advertised["amx_int8"] = f.adv_amx_int8;
    py::dict out;
    out["usable"] = usable;
    out["advertised"] = advertised;
    out["summary"] = cpu_features_string();
    return out;
  }, "CPU paths this process can run: 'usable' entries were verified by executing an instruction.");
  m.def("sigill_probe_self_test", &sigill_probe_self_test,
        "Run ud2 under the instruction probe; True if the fault was caught and reported as unusable.");
}

}  // namespace ls
