#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "bindings/bindings.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace py = pybind11;

namespace ls {
namespace {

struct PyTokenizer {
  std::unique_ptr<Tokenizer> tok;

  void check(int64_t id) const {
    if (id < 0 || id >= tok->n_vocab())
      throw py::index_error("token id " + std::to_string(id) + " out of range [0, " + std::to_string(tok->n_vocab()) + ")");
  }
};

py::bytes to_bytes(std::string_view s) { return py::bytes(s.data(), s.size()); }

py::str to_str(std::string_view s) {  // s is always valid UTF-8 here
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::enum_<TokenType>(m, "TokenType")
      .value("NORMAL", TokenType::Normal)
      .value("UNKNOWN", TokenType::Unknown)
      .value("CONTROL", TokenType::Control)
      .value("USER_DEFINED", TokenType::UserDefined)
      .value("UNUSED", TokenType::Unused)
      .value("BYTE", TokenType::Byte);

  py::class_<PyTokenizer>(m, "Tokenizer",
      "Tokenizer read from a GGUF file (byte-level BPE or SPM), token for token as llama.cpp.")
      .def(py::init([](const py::object& path_like, bool keep_text_index) {
             const std::string path = py::module_::import("os").attr("fspath")(path_like).cast<std::string>();
             py::gil_scoped_release nogil;
             GgufFile f(path);
             return PyTokenizer{Tokenizer::from_gguf(f, keep_text_index)};
           }), py::arg("path"), py::arg("keep_text_index") = true,
           "keep_text_index=False: as in a lane, the text → id index is dropped after loading and\n"
           "rebuilt by the first encode that needs it.")
      .def(py::init([](const std::shared_ptr<GgufFile>& f) {
             if (!f) throw py::value_error("GgufFile is None");
             py::gil_scoped_release nogil;
             return PyTokenizer{Tokenizer::from_gguf(*f)};
           }), py::arg("gguf"))
      .def("encode", [](const PyTokenizer& t, const std::string& text, bool add_special, bool parse_special) {
             std::vector<int32_t> ids;
             {
               py::gil_scoped_release nogil;
               ids = t.tok->encode(text, add_special, parse_special);
             }
             return ids;
           }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false,
           "Token ids of text (str is encoded as UTF-8; bytes are taken as is).")
      .def("piece", [](const PyTokenizer& t, int64_t id, bool special) {
             t.check(id);
             return to_bytes(t.tok->piece(int32_t(id), special));
           }, py::arg("id"), py::arg("special") = false,
           "Raw bytes of one token (may be partial UTF-8); control/unknown tokens are empty unless special.")
      .def("decode", [](const PyTokenizer& t, const std::vector<int64_t>& ids, bool special) {
             std::vector<int32_t> v;
             v.reserve(ids.size());
             for (int64_t id : ids) {
               t.check(id);
               v.push_back(int32_t(id));
             }
             std::string out;
             {
               py::gil_scoped_release nogil;
               out = t.tok->decode(v, special);
             }
             return to_bytes(out);
           }, py::arg("ids"), py::arg("special") = false, "Concatenated piece bytes.")
      .def("token_type", [](const PyTokenizer& t, int64_t id) {
             t.check(id);
             return t.tok->token_type(int32_t(id));
           }, py::arg("id"))
      .def("is_eog", [](const PyTokenizer& t, int64_t id) {
             return id >= 0 && id < t.tok->n_vocab() && t.tok->is_eog(int32_t(id));
           }, py::arg("id"))
      .def_property_readonly("n_vocab", [](const PyTokenizer& t) { return t.tok->n_vocab(); })
      .def_property_readonly("bos_id", [](const PyTokenizer& t) { return t.tok->bos_id(); })
      .def_property_readonly("eos_id", [](const PyTokenizer& t) { return t.tok->eos_id(); })
      .def_property_readonly("add_bos", [](const PyTokenizer& t) { return t.tok->add_bos(); })
      .def_property_readonly("add_eos", [](const PyTokenizer& t) { return t.tok->add_eos(); })
      .def_property_readonly("eog_ids", [](const PyTokenizer& t) { return t.tok->eog_ids(); });

  m.def("_pretokenize", [](const std::string& pre, const std::string& text) {
        tok::PreKind kind;
        bool ignore_merges;
        if (!tok::pre_kind_from_name(pre, &kind, &ignore_merges)) throw py::value_error("unknown pre-tokenizer '" + pre + "'");
        tok::PreScratch scratch;
        std::string_view used;
        std::vector<std::pair<uint32_t, uint32_t>> pieces;
        tok::pretokenize(kind, text, scratch, &used, pieces);
        py::list out;
        for (const auto& r : pieces) out.append(to_bytes(used.substr(r.first, r.second - r.first)));
        return out;
      }, py::arg("pre"), py::arg("text"), "Testing aid: the pre-tokenizer pieces (bytes) of text.");

  py::class_<Utf8Stream>(m, "Utf8Stream",
      "Assembles token piece bytes into text, emitting only complete UTF-8 characters.")
      .def(py::init<>())
      .def("push", [](Utf8Stream& s, const std::string& piece) { return to_str(s.push(piece)); }, py::arg("piece"))
      .def("finish", [](Utf8Stream& s) { return to_str(s.finish()); },
           "End of stream: dangling incomplete bytes come out as U+FFFD; the stream is reset.")
      .def("reset", &Utf8Stream::reset);
}

}  // namespace ls
