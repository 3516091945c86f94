#include <pybind11/stl.h>

#include <cstring>
#include <memory>

#include "bindings/bindings.h"
#include "gguf/gguf.h"

namespace py = pybind11;

namespace ls {
namespace {

py::object scalar_to_py(GgufType t, const GgufValue& v) {
  switch (t) {
    case GgufType::BOOL: return py::bool_(v.i64 != 0);
    case GgufType::F32: case GgufType::F64: return py::float_(v.f64);
    case GgufType::U64: return py::int_(v.u64);
    case GgufType::STRING: {
      // A metadata string of a downloaded file may be any bytes (found by benchmarks/fuzz.py gguf:
      // py::str raised UnicodeDecodeError out of /api/show and the gateway's start). Names and
      // templates are text, so undecodable bytes become U+FFFD rather than an exception.
      PyObject* o = PyUnicode_DecodeUTF8(v.str.data(), Py_ssize_t(v.str.size()), "replace");
      if (!o) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(o);
    }
    default: return py::int_(v.i64);
  }
}

py::object value_to_py(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) return py::none();
  if (v->type != GgufType::ARRAY) return scalar_to_py(v->type, *v);
  py::list out;
  if (v->arr_type == GgufType::STRING) {
    for (std::string_view s : v->strings()) {
      // Vocab entries may be arbitrary bytes; surface undecodable ones as bytes, not an exception.
      PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "strict");
      if (o) {
        out.append(py::reinterpret_steal<py::object>(o));
      } else {
        PyErr_Clear();
        out.append(py::bytes(s.data(), s.size()));
      }
    }
    return out;
  }
  if (v->arr_type == GgufType::F32 || v->arr_type == GgufType::F64) {
    for (float x : f.get_float_array(key)) out.append(x);
  } else {
    for (int32_t x : f.get_int_array(key)) out.append(x);
  }
  return out;
}

}  // namespace

void bind_gguf(py::module_& m) {
  py::register_exception<GgufError>(m, "GgufError", PyExc_ValueError);
  py::class_<GgufFile, std::shared_ptr<GgufFile>>(m, "GgufFile",
      "A GGUF file mapped read-only; metadata and the tensor table (weights stay in the mapping).")
      .def(py::init([](const std::string& path) {
             py::gil_scoped_release nogil;
             return std::make_shared<GgufFile>(path);
           }), py::arg("path"))
      .def_property_readonly("path", &GgufFile::path)
      .def_property_readonly("version", &GgufFile::version)
      .def_property_readonly("alignment", &GgufFile::alignment)
      .def_property_readonly("data_offset", &GgufFile::data_offset)
      .def("keys", &GgufFile::keys)
      .def("get", [](const GgufFile& f, const std::string& key, py::object dflt) {
             return f.find(key) ? value_to_py(f, key) : dflt;
           }, py::arg("key"), py::arg("default") = py::none())
      .def("__contains__", [](const GgufFile& f, const std::string& key) { return f.find(key) != nullptr; })
      .def("tensors", [](const GgufFile& f) {
             py::list out;
             for (const GgufTensor& t : f.tensors()) {
               py::list shape;
               for (uint32_t d = 0; d < t.n_dims; ++d) shape.append(t.ne[d]);
               py::dict info;
               info["name"] = t.name;
               info["type"] = uint32_t(t.type);
               info["type_name"] = ggml_type_info(t.type).name;
               info["shape"] = shape;
               info["offset"] = t.offset;
               info["size_bytes"] = t.size_bytes;
               out.append(info);
             }
             return out;
           })
      .def("tensor_bytes", [](const GgufFile& f, const std::string& name) {
             const GgufTensor& t = f.require_tensor(name);
             return py::bytes(reinterpret_cast<const char*>(t.data), t.size_bytes);
           }, "A copy of one tensor's raw bytes (for tests).");
}

}  // namespace ls
