// lanes._runtime.Lane: the lane process's native loop (see lane/lane_loop.h).
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "bindings/engine_options.h"
#include "lane/lane_loop.h"

namespace py = pybind11;

namespace ls {

void bind_lane(py::module_& m) {
  py::register_local_exception<ring::RingError>(m, "RingError", PyExc_RuntimeError);
  py::class_<lane::LaneLoop>(m, "Lane")
      .def(py::init([](int request_fd, size_t request_segment_bytes, int output_fd, size_t output_segment_bytes,
                       const std::string& wake_semaphore, const std::string& output_bell_kind, int output_bell_fd,
                       const std::string& output_bell_name, int expected_ppid, size_t max_pending_bytes,
                       uint64_t prefill_budget_ns_per_token, int64_t idle_wait_ns) {
             lane::LaneOptions o;
             o.request_fd = request_fd;
             o.request_segment_bytes = request_segment_bytes;
             o.output_fd = output_fd;
             o.output_segment_bytes = output_segment_bytes;
             o.wake_semaphore = wake_semaphore;
             o.output_bell_kind = output_bell_kind;
             o.output_bell_fd = output_bell_fd;
             o.output_bell_name = output_bell_name;
             o.expected_ppid = expected_ppid;
             o.max_pending_bytes = max_pending_bytes;
             o.prefill_budget_ns_per_token = prefill_budget_ns_per_token;
             o.idle_wait_ns = idle_wait_ns;
             return new lane::LaneLoop(o);
           }),
           py::kw_only(), py::arg("request_fd"), py::arg("request_segment_bytes"), py::arg("output_fd"),
           py::arg("output_segment_bytes"), py::arg("wake_semaphore"), py::arg("output_bell_kind"),
           py::arg("output_bell_fd") = -1, py::arg("output_bell_name") = "", py::arg("expected_ppid") = 0,
           py::arg("max_pending_bytes") = size_t(1) << 20, py::arg("prefill_budget_ns_per_token") = 20'000'000,
           py::arg("idle_wait_ns") = 50'000'000)
      .def("load_and_run",
           [](lane::LaneLoop& l, const std::string& path, int threads, int ctx_size, int num_slots, int max_batch_tokens,
              const std::string& repack_cache_dir, const std::vector<std::tuple<uint32_t, std::string, std::string>>& adapters,
              int64_t prompt_cache_mib, int64_t kv_cache_mib, const std::string& prefix_cache_dir,
              int64_t prefix_cache_disk_mib) {
             std::vector<lane::StartupAdapter> startup;
             for (const auto& [id, name, adapter_path] : adapters) startup.push_back({id, name, adapter_path});
             const lane::BackendOptions o = engine_options(threads, ctx_size, num_slots, max_batch_tokens,
                                                           repack_cache_dir, prompt_cache_mib, kv_cache_mib,
                                                           prefix_cache_dir, prefix_cache_disk_mib);
             py::gil_scoped_release nogil;
             return l.load_and_run(path, o, startup);
           },
           py::arg("path"), py::arg("threads"), py::arg("ctx_size") = 0, py::arg("num_slots") = 8,
           py::arg("max_batch_tokens") = 256, py::arg("repack_cache_dir") = "",
           py::arg("adapters") = std::vector<std::tuple<uint32_t, std::string, std::string>>{},
           py::arg("prompt_cache_mib") = 0, py::arg("kv_cache_mib") = 0, py::arg("prefix_cache_dir") = "",
           py::arg("prefix_cache_disk_mib") = 4096,
           "Load the model and the LoRA adapters [(id, name, path)] (one ADAPTER record each), send HELLO (or "
           "ERROR load_failed), run until stop/SHUTDOWN/parent death. "
           "Returns 'shutdown', 'stopped', 'parent_died' or 'load_failed'.")
      .def("stop", &lane::LaneLoop::stop, "Async-signal-friendly: sets the native stop flag.");
  m.def("lane_backends", &lane::backend_names);
}

}  // namespace ls
