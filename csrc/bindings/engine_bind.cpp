// lanes._runtime.Engine: the in-process generation API (wrapped by lanes.Model).
#include <algorithm>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "bindings/engine_options.h"
#include "bindings/sampling_params.h"
#include "engine/batch_engine.h"
#include "engine/disk_tier.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace ls {
namespace {

py::str utf8_to_py(std::string_view s) {
  // Pieces may end mid-character; replace rather than raise (detokenize of arbitrary ids).
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

SamplingParams sampling_from_kwargs(const py::dict& kw) { return sampling_from_dict(kw, false); }

py::dict stats_dict(const GenerationStats& s) {
  py::dict d;
  d["prompt_tokens"] = s.prompt_tokens;
  d["cached_tokens"] = s.cached_tokens;
  d["completion_tokens"] = s.completion_tokens;
  d["prefill_ns"] = s.prefill_ns;
  d["decode_ns"] = s.decode_ns;
  return d;
}

GenerationRequest make_request(const std::vector<int32_t>& prompt_ids, int32_t max_tokens,
                               const std::vector<std::string>& stop, const py::dict& kw) {
  GenerationRequest req;
  req.prompt_ids = prompt_ids;
  req.max_tokens = max_tokens;
  req.stop = stop;
  req.sampling = sampling_from_kwargs(kw);
  if (kw.contains("grammar") && !kw["grammar"].is_none()) req.grammar = kw["grammar"].cast<std::string>();
  if (kw.contains("adapters") && !kw["adapters"].is_none())  // [(adapter id, scale)] (BatchEngine)
    for (const auto& [id, scale] : kw["adapters"].cast<std::vector<std::pair<int32_t, float>>>())
      req.adapters.push_back(AdapterScale{id, scale});
  if (kw.contains("images") && !kw["images"].is_none())  // [(pos, float32 [n_tokens, n_embd], non_causal, content hash)]
    for (py::handle h : kw["images"].cast<py::list>()) {
      auto t = h.cast<py::tuple>();
      if (t.size() != 4) throw py::value_error("each image is (pos, embeddings, non_causal, content_hash)");
      auto a = t[1].cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
      if (a.ndim() != 2) throw py::value_error("image embeddings must be 2-D (n_tokens, n_embd)");
      PromptImage im;
      im.pos = t[0].cast<int32_t>();
      im.n_tokens = int32_t(a.shape(0));
      im.embd = std::make_shared<const std::vector<float>>(a.data(), a.data() + a.size());
      im.non_causal = t[2].cast<bool>();
      im.content_hash = t[3].cast<uint64_t>();
      req.images.push_back(std::move(im));
    }
  return req;
}

}  // namespace

void bind_batch_engine(py::module_& m) {
  py::class_<BatchEngine>(m, "BatchEngine",
                          "Continuous batching over one model (what a lane runs): many sequences, one forward "
                          "pass per step.")
      .def(py::init([](const std::string& path, int threads, int ctx_size, int num_slots, int max_batch_tokens,
                       const std::string& repack_cache_dir, int64_t prompt_cache_mib, int64_t kv_cache_mib,
                       uint64_t page_shuffle_seed, const std::string& prefix_cache_dir, int64_t prefix_cache_disk_mib) {
             BatchEngineOptions o = engine_options(threads, ctx_size, num_slots, max_batch_tokens, repack_cache_dir,
                                                   prompt_cache_mib, kv_cache_mib, prefix_cache_dir,
                                                   prefix_cache_disk_mib);
             o.page_shuffle_seed = page_shuffle_seed;
             py::gil_scoped_release nogil;
             return new BatchEngine(path, o);
           }),
           py::arg("path"), py::arg("threads") = 0, py::arg("ctx_size") = 0, py::arg("num_slots") = 8,
           py::arg("max_batch_tokens") = 256, py::arg("repack_cache_dir") = "", py::arg("prompt_cache_mib") = 0,
           py::arg("kv_cache_mib") = 0, py::arg("page_shuffle_seed") = 0, py::arg("prefix_cache_dir") = "",
           py::arg("prefix_cache_disk_mib") = 4096,
           "K/V page pool: kv_cache_mib (0: num_slots whole contexts) + prompt_cache_mib (room for cached "
           "prefixes); page_shuffle_seed != 0 hands pages out in a seeded random order (tests); "
           "prefix_cache_dir: the prefix cache's disk tier, at most prefix_cache_disk_mib of page files.")
      .def_property_readonly("repack_status", &BatchEngine::repack_status)
      .def("prompt_cache_stats",
           [](const BatchEngine& e) {
             const PromptCacheStats s = e.prompt_cache_stats();
             py::dict d;
             d["bytes_used"] = s.bytes_used;
             d["max_bytes"] = s.max_bytes;
             d["entries"] = s.entries;
             d["hits"] = s.hits;
             d["hit_tokens"] = s.hit_tokens;
             d["stores"] = s.stores;
             d["evictions"] = s.evictions;
             d["pages_total"] = s.pages_total;
             d["pages_free"] = s.pages_free;
             d["window_pages_total"] = s.window_pages_total;
             d["window_pages_free"] = s.window_pages_free;
             d["disk_reads"] = s.disk_reads;
             d["disk_writes"] = s.disk_writes;
             d["disk_bytes_used"] = s.disk_bytes_used;
             d["disk_max_bytes"] = s.disk_max_bytes;
             return d;
           },
           "The prefix cache's figures (engine/prefix_tree.h): bytes_used and entries (pages the tree holds), "
           "max_bytes (the page pool), hits, hit_tokens, stores and evictions (pages), pages_total, pages_free, window_pages_total and window_pages_free (the sliding-window layers' own pool, 0 without); "
           "the disk tier's disk_reads and disk_writes (pages), disk_bytes_used, disk_max_bytes.")
      .def("save_slot", [](BatchEngine& e, int32_t slot, const std::string& filename) {
             const SlotFileResult r = e.save_slot(slot, filename);
             return py::make_tuple(r.n_tokens, r.n_bytes);
           }, py::arg("slot"), py::arg("filename"), "-> (n_tokens, n_bytes) (BatchEngine::save_slot)")
      .def("restore_slot", [](BatchEngine& e, int32_t slot, const std::string& filename) {
             const SlotFileResult r = e.restore_slot(slot, filename);
             return py::make_tuple(r.n_tokens, r.n_bytes);
           }, py::arg("slot"), py::arg("filename"), "-> (n_tokens, n_bytes) (BatchEngine::restore_slot)")
      .def("erase_slot", &BatchEngine::erase_slot, py::arg("slot"))
      .def_property_readonly("n_ctx", &BatchEngine::n_ctx)
      .def_property_readonly("num_slots", &BatchEngine::num_slots)
      .def_property_readonly("max_batch_tokens", &BatchEngine::max_batch_tokens)
      .def_property_readonly("kv_cache_bytes", &BatchEngine::kv_cache_bytes)
      .def_property_readonly("num_active", &BatchEngine::num_active)
      .def_property_readonly("num_waiting", &BatchEngine::num_waiting)
      .def_property_readonly("last_batch_tokens", &BatchEngine::last_batch_tokens)
      .def("has_work", &BatchEngine::has_work)
      .def("add", [](BatchEngine& e, uint64_t rid, uint32_t choice, const std::vector<int32_t>& prompt_ids,
                     int32_t max_tokens, const std::vector<std::string>& stop, py::kwargs kw) {
             e.add(rid, choice, make_request(prompt_ids, max_tokens, stop, kw));
           }, py::arg("request_id"), py::arg("choice"), py::arg("prompt_ids"), py::arg("max_tokens"),
           py::arg("stop") = std::vector<std::string>{})
      .def("add_embedding", &BatchEngine::add_embedding, py::arg("request_id"), py::arg("choice"),
           py::arg("prompt_ids"))
      .def_property_readonly("n_embd", &BatchEngine::n_embd)
      .def("load_adapter", &BatchEngine::load_adapter, py::arg("id"), py::arg("path"),
           py::call_guard<py::gil_scoped_release>(),
           "Load a LoRA adapter (GGUF) under id; returns its tensor bytes. Requests name it with "
           "adapters=[(id, scale)].")
      .def("unload_adapter", &BatchEngine::unload_adapter, py::arg("id"))
      .def_property_readonly("adapter_ids", &BatchEngine::adapter_ids)
      .def("cancel", [](BatchEngine& e, uint64_t request_id) { return e.cancel(request_id); }, py::arg("request_id"))
      .def("cancel_with_stats", [](BatchEngine& e, uint64_t request_id) {
             std::vector<DroppedSeq> dropped;
             e.cancel(request_id, &dropped);
             py::list out;
             for (const DroppedSeq& d : dropped) out.append(py::make_tuple(d.choice, stats_dict(d.stats)));
             return out;
           }, py::arg("request_id"), "Like cancel; returns [(choice, stats)] of the dropped choices' work so far.")
      .def("step", [](BatchEngine& e, bool with_embeddings) {
             const std::vector<SeqEvent>* events;
             {
               py::gil_scoped_release nogil;
               events = &e.step();
             }
             py::list out;
             for (const SeqEvent& ev : *events) {
               py::tuple t = py::make_tuple(ev.request_id, ev.choice, py::bytes(ev.text.data(), ev.text.size()),
                                            ev.finished, finish_reason_name(ev.reason), stats_dict(ev.stats));
               if (with_embeddings) {
                 py::object v = py::none();
                 if (ev.embedding) {
                   py::array_t<float> a(e.n_embd());
                   std::copy(ev.embedding, ev.embedding + e.n_embd(), a.mutable_data());
                   v = std::move(a);
                 }
                 t = py::make_tuple(t[0], t[1], t[2], t[3], t[4], t[5], v);
               }
               out.append(std::move(t));
             }
             return out;
           }, py::arg("with_embeddings") = false,
           "One step; returns [(request_id, choice, text bytes, finished, finish_reason, stats)] (with_embeddings: "
           "+ the float32 [n_embd] embedding of a finished embedding sequence, else None).");
}

// The disk tier alone, over bytes (tests of its files and budget without a model).
static void bind_disk_tier(py::module_& m) {
  py::class_<DiskTier>(m, "PrefixDiskTier", "The prefix cache's disk tier (engine/disk_tier.h), pages as bytes.")
      .def(py::init<const std::string&, const std::string&, size_t, int64_t, int32_t>(), py::arg("dir"),
           py::arg("identity"), py::arg("page_bytes"), py::arg("max_bytes"), py::arg("max_ids"))
      .def_static("prefix_hash", [](const std::vector<int32_t>& ids) {
             return DiskTier::prefix_hash(ids.data(), int32_t(ids.size()));
           })
      .def("put", [](DiskTier& d, const std::vector<int32_t>& ids, const py::bytes& data) {
             const std::string b = data;
             if (b.size() != d.page_bytes()) throw std::invalid_argument("data must be page_bytes long");
             return d.put(ids.data(), int32_t(ids.size()), DiskTier::prefix_hash(ids.data(), int32_t(ids.size())),
                          reinterpret_cast<const uint8_t*>(b.data()));
           })
      .def("get", [](DiskTier& d, const std::vector<int32_t>& ids) -> py::object {
             std::string out(d.page_bytes(), '\0');
             if (!d.get(ids.data(), int32_t(ids.size()), DiskTier::prefix_hash(ids.data(), int32_t(ids.size())),
                        reinterpret_cast<uint8_t*>(out.data())))
               return py::none();
             return py::bytes(out);
           })
      .def("contains", [](const DiskTier& d, const std::vector<int32_t>& ids) {
             return d.contains(DiskTier::prefix_hash(ids.data(), int32_t(ids.size())));
           })
      .def("flush", &DiskTier::flush, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const DiskTier& d) {
             const DiskTierStats s = d.stats();
             py::dict o;
             o["bytes_used"] = s.bytes_used;
             o["max_bytes"] = s.max_bytes;
             o["files"] = s.files;
             o["writes"] = s.writes;
             o["reads"] = s.reads;
             o["dropped"] = s.dropped;
             o["evictions"] = s.evictions;
             return o;
           });
}

void bind_engine(py::module_& m) {
  bind_disk_tier(m);
  py::class_<Engine>(m, "Engine", "One model with its tokenizer; runs one generation at a time.")
      .def(py::init([](const std::string& path, int threads, int ctx_size, int max_batch, const std::string& repack_cache_dir) {
             py::gil_scoped_release nogil;
             return new Engine(path, threads, ctx_size, max_batch, repack_cache_dir);
           }),
           py::arg("path"), py::arg("threads") = 0, py::arg("ctx_size") = 0, py::arg("max_batch") = 512,
           py::arg("repack_cache_dir") = "")
      .def_property_readonly("repack_status", [](Engine& e) { return e.model().repack_status(); })
      .def_property_readonly("n_vocab", [](Engine& e) { return e.model().config().n_vocab; })
      .def_property_readonly("n_ctx", &Engine::n_ctx)
      .def_property_readonly("n_ctx_train", [](Engine& e) { return e.model().config().n_ctx_train; })
      .def_property_readonly("arch", [](Engine& e) { return e.model().config().arch_name; })
      .def_property_readonly("threads", [](Engine& e) { return e.model().pool().num_threads(); })
      .def_property_readonly("eog_ids", [](Engine& e) { return e.tokenizer().eog_ids(); })
      .def_property_readonly("bos_id", [](Engine& e) { return e.tokenizer().bos_id(); })
      .def_property_readonly("chat_template", [](Engine& e) -> py::object {
        const GgufValue* v = e.gguf().find("tokenizer.chat_template");
        if (!v || v->type != GgufType::STRING) return py::none();
        return utf8_to_py(v->str);
      })
      .def("tokenize", [](Engine& e, const std::string& text, bool add_special, bool parse_special) {
             py::gil_scoped_release nogil;
             return e.tokenizer().encode(text, add_special, parse_special);
           }, py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def("detokenize", [](Engine& e, const std::vector<int32_t>& ids, bool special) {
             for (int32_t id : ids)
               if (id < 0 || id >= e.tokenizer().n_vocab()) throw py::index_error("token id out of range");
             return utf8_to_py(e.tokenizer().decode(ids, special));
           }, py::arg("ids"), py::arg("special") = false)
      .def("logits", [](Engine& e, const std::vector<int32_t>& ids) {
             const int64_t n_vocab = e.model().config().n_vocab;
             py::array_t<float> out({int64_t(ids.size()), n_vocab});
             float* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               e.logits(ids, dst);
             }
             return out;
           }, py::arg("ids"))
      .def("hidden_states", [](Engine& e, const std::vector<int32_t>& ids) {
             py::array_t<float> out({int64_t(ids.size()), int64_t(e.model().config().n_embd)});
             float* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               e.hidden_states(ids, dst);
             }
             return out;
           }, py::arg("ids"), "Final hidden states (after the output norm) [len(ids), n_embd], teacher-forced.")
      .def_property_readonly("n_embd", [](Engine& e) { return e.model().config().n_embd; })
      .def("last_logits_with_images", [](Engine& e, const std::vector<int32_t>& ids, py::list images) {
             // images: (pos, float32 [n_tokens, n_embd] embeddings, non_causal) triples.
             const int64_t E = e.model().config().n_embd;
             std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>> keep;
             std::vector<Engine::ImageSpan> spans;
             for (py::handle h : images) {
               auto t = h.cast<py::tuple>();
               if (t.size() != 3) throw py::value_error("each image is (pos, embeddings, non_causal)");
               keep.emplace_back(t[1]);
               const auto& a = keep.back();
               if (a.ndim() != 2 || a.shape(1) != E)
                 throw py::value_error("image embeddings must have shape (n_tokens, " + std::to_string(E) + ")");
               spans.push_back({t[0].cast<int32_t>(), int32_t(a.shape(0)), a.data(), t[2].cast<bool>()});
             }
             py::array_t<float> out(py::ssize_t(e.model().config().n_vocab));
             float* dst = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               e.last_logits_with_images(ids, spans, dst);
             }
             return out;
           }, py::arg("ids"), py::arg("images"),
           "Last position's logits of ids (one batch) with image embeddings in place of their positions.")
      .def("start", [](Engine& e, const std::vector<int32_t>& prompt_ids, int32_t max_tokens,
                       const std::vector<std::string>& stop, py::kwargs kw) {
             e.start(make_request(prompt_ids, max_tokens, stop, kw));
           }, py::arg("prompt_ids"), py::arg("max_tokens"), py::arg("stop") = std::vector<std::string>{})
      .def("step", [](Engine& e) {
             StepResult r;
             {
               py::gil_scoped_release nogil;
               r = e.step();
             }
             return py::make_tuple(utf8_to_py(r.text), r.token, r.finished, finish_reason_name(r.reason));
           }, "Runs one token; returns (text, token, finished, finish_reason).")
      .def("cancel", &Engine::cancel)
      .def("set_adapters", &Engine::set_adapters, py::arg("adapters"), py::call_guard<py::gil_scoped_release>(),
           "LoRA adapters [(path, scale)] every later forward applies ([] = base model).")
      .def_property_readonly("active", &Engine::active)
      .def("stats", [](Engine& e) { return stats_dict(e.stats()); });

  // The lane's reasoning splitter on its own (unit tests): push/flush return (content, reasoning).
  py::class_<ReasoningSplitter>(m, "ReasoningSplitter")
      .def(py::init([](const std::string& open, const std::string& close, bool starts_inside, bool harmony,
                       bool as_content, bool calls) {
             auto* s = new ReasoningSplitter();
             s->reset(ReasoningFormat{open, close, starts_inside, harmony, as_content, calls});
             return s;
           }), py::arg("open"), py::arg("close"), py::arg("starts_inside") = false, py::arg("harmony") = false,
           py::arg("as_content") = false, py::arg("calls") = false)
      .def("push", [](ReasoningSplitter& s, const std::string& text) {
             std::string content, reasoning;
             s.push(text, content, reasoning);
             return py::make_tuple(utf8_to_py(content), utf8_to_py(reasoning));
           })
      .def("flush", [](ReasoningSplitter& s) {
             std::string content, reasoning;
             s.flush(content, reasoning);
             return py::make_tuple(utf8_to_py(content), utf8_to_py(reasoning));
           })
      .def_property_readonly("inside", &ReasoningSplitter::inside);
}

}  // namespace ls
