// lanes._runtime.VisionEncoder: an mmproj file's encoder (csrc/vision/).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "bindings/bindings.h"
#include "vision/vision_encoder.h"

namespace py = pybind11;

namespace ls {

void bind_vision(py::module_& m) {
  py::class_<VisionEncoder, std::shared_ptr<VisionEncoder>>(m, "VisionEncoder",
      "A vision projector (mmproj GGUF) mapped read-only: encodes one normalised image_size² input into image "
      "embeddings for the text model. Raises GgufError for an unsupported projector type or a text_n_embd "
      "(when given) the projector does not output.")
      .def(py::init([](const std::string& path, int n_threads, int64_t text_n_embd) {
             if (n_threads < 1) throw std::invalid_argument("n_threads must be >= 1");
             py::gil_scoped_release nogil;
             auto mmproj = std::make_shared<const Mmproj>(path);
             if (text_n_embd > 0) mmproj->require_text_embd(text_n_embd);
             return std::make_shared<VisionEncoder>(std::move(mmproj), n_threads);
           }), py::arg("path"), py::arg("n_threads") = 1, py::arg("text_n_embd") = 0)
      .def_property_readonly("path", [](const VisionEncoder& e) { return e.mmproj().path(); })
      .def_property_readonly("projector_type",
                             [](const VisionEncoder& e) { return projector_type_name(e.mmproj().hparams().projector); })
      .def_property_readonly("image_size", [](const VisionEncoder& e) { return e.mmproj().hparams().image_size; })
      .def_property_readonly("patch_size", [](const VisionEncoder& e) { return e.mmproj().hparams().patch_size; })
      .def_property_readonly("merge", [](const VisionEncoder& e) { return e.mmproj().hparams().merge; })
      .def_property_readonly("longest_edge", [](const VisionEncoder& e) { return e.mmproj().hparams().longest_edge; })
      .def_property_readonly("image_mean", [](const VisionEncoder& e) {
             const float* v = e.mmproj().hparams().image_mean;
             return std::vector<float>(v, v + 3);
           })
      .def_property_readonly("image_std", [](const VisionEncoder& e) {
             const float* v = e.mmproj().hparams().image_std;
             return std::vector<float>(v, v + 3);
           })
      .def_property_readonly("n_embd_out", &VisionEncoder::n_embd_out)
      .def_property_readonly("tokens_per_image", &VisionEncoder::n_tokens)
      .def_property_readonly("n_threads", &VisionEncoder::n_threads)
      .def("encode", [](VisionEncoder& e, py::array_t<float, py::array::c_style | py::array::forcecast> pixels) {
             const int s = e.mmproj().hparams().image_size;
             if (pixels.ndim() != 3 || pixels.shape(0) != 3 || pixels.shape(1) != s || pixels.shape(2) != s)
               throw std::invalid_argument("pixels must have shape (3, " + std::to_string(s) + ", " + std::to_string(s) + ")");
             py::array_t<float> out({py::ssize_t(e.n_tokens()), py::ssize_t(e.n_embd_out())});
             const float* in = pixels.data();
             float* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               e.encode(in, dst);
             }
             return out;
           }, py::arg("pixels"),
           "pixels: float32 (3, image_size, image_size), normalised → embeddings (tokens_per_image, n_embd_out).");
}

}  // namespace ls
