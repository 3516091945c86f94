// lanes._ring: shared-memory ring access for the gateway (no runtime code linked in).
// Segments and semaphores are created/unlinked by posix_ipc in Python; this module maps them
// and does every index and atomic operation.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>

#include "ring/delta_relay.h"
#include "ring/doorbell.h"
#include "ring/json_escape.h"
#include "ring/ring.h"
#include "ring/stress.h"
#include "ring/wire.h"

namespace py = pybind11;
using namespace ls::ring;
namespace wire = ls::wire;

namespace {

class RingWriter {
 public:
  RingWriter(int fd, size_t segment_bytes, const std::string& bell_kind, int bell_fd, const std::string& bell_name)
      : producer_(RingView(fd, segment_bytes)), bell_(Doorbell::from_spec(bell_kind, bell_fd, bell_name)) {}
  // False if the ring is full right now; rings the doorbell when the reader armed it.
  bool write(uint32_t type, py::bytes payload) {
    if (type == kPadType) throw RingError("record type 0 is reserved for padding");
    char* data;
    Py_ssize_t n;
    PYBIND11_BYTES_AS_STRING_AND_SIZE(payload.ptr(), &data, &n);
    const Piece piece{data, size_t(n)};
    if (!producer_.try_write(type, &piece, 1)) return false;
    if (producer_.take_bell()) bell_.ring();
    return true;
  }
  size_t max_payload_bytes() const { return producer_.max_payload_bytes(); }
  void close() { producer_.close(); }
  Producer& producer() { return producer_; }
  const Doorbell& bell() const { return bell_; }

 private:
  Producer producer_;
  Doorbell bell_;
};

class RingReader {
 public:
  RingReader(int fd, size_t segment_bytes) : consumer_(RingView(fd, segment_bytes)) {}
  // Copies up to max_records records out (one py::bytes each) and releases their space.
  py::list read_batch(size_t max_records) {
    py::list out;
    consumer_.read(max_records, [&](uint32_t type, const uint8_t* p, size_t n) {
      out.append(py::make_tuple(type, py::bytes(reinterpret_cast<const char*>(p), n)));
    });
    return out;
  }
  // The per-token path (see ring/delta_relay.h). Returns (queued, partial, control, more):
  // queued: None or [(request_id, choice, framed bytes)] for routes not in direct mode;
  // partial: None or [(request_id, unsent bytes, send_errno)] for direct sends that did not
  // complete; control: None or (type, payload) of the record that ended the walk; more: records
  // may be waiting (otherwise the doorbell is armed).
  py::tuple pump(size_t max_records, int bell_fd) {
    const DeltaRelay::Result r = relay_.pump(consumer_, bell_fd, max_records);
    py::object queued = py::none(), partial = py::none(), control = py::none();
    try {  // copy out of ring memory, then release it; never leave relayed records unreleased
      if (!relay_.queued().empty()) {
        py::list q;
        const std::string& bytes = relay_.queued_bytes();
        for (const auto& e : relay_.queued())
          q.append(py::make_tuple(e.request_id, e.choice, py::bytes(bytes.data() + e.offset, e.size)));
        queued = std::move(q);
      }
      if (!relay_.partials().empty()) {
        py::list pl;
        const std::string& bytes = relay_.partial_bytes();
        for (const auto& e : relay_.partials()) {
          py::object unsent = e.size ? py::object(py::bytes(bytes.data() + e.offset, e.size)) : py::object(py::none());
          pl.append(py::make_tuple(e.request_id, std::move(unsent), e.send_errno));
        }
        partial = std::move(pl);
      }
      if (r.control)
        control = py::make_tuple(r.control_type,
                                 py::bytes(reinterpret_cast<const char*>(r.control), r.control_bytes));
    } catch (...) {
      relay_.finish(consumer_);  // a re-read would frame the same deltas twice
      throw;
    }
    relay_.finish(consumer_);
    const bool more = r.full || r.control || consumer_.arm();
    return py::make_tuple(std::move(queued), std::move(partial), std::move(control), more);
  }
  // framings: (choice, channel, prefix, suffix); (choice, channel, prefix, middle, suffix): the
  // escaped text twice (prefix + text + middle + text + suffix); (choice, channel, prefix, middle,
  // suffix, first_number): numbered events (prefix + N + middle + text + suffix, N from first_number).
  void add_route(uint64_t rid, uint32_t num_choices, const std::vector<py::tuple>& framings, bool collect,
                 bool keep_text) {
    std::vector<DeltaRelay::Framing> fs;
    fs.reserve(framings.size());
    for (const py::tuple& t : framings) {
      if (t.size() < 4 || t.size() > 6) {
        throw py::value_error("a framing is (choice, channel, prefix[, middle], suffix[, first_number])");
      }
      const size_t suffix_at = t.size() == 6 ? 4 : t.size() - 1;
      DeltaRelay::Framing f{t[0].cast<uint32_t>(), t[1].cast<uint32_t>(), std::string(t[2].cast<py::bytes>()),
                            std::string(t[suffix_at].cast<py::bytes>())};
      if (t.size() >= 5) {
        f.middle = std::string(t[3].cast<py::bytes>());
        f.kind = t.size() == 5 ? DeltaRelay::kTwice : DeltaRelay::kNumbered;
      }
      if (t.size() == 6) f.first_number = t[5].cast<uint64_t>();
      fs.push_back(std::move(f));
    }
    relay_.add_route(rid, num_choices, fs, collect, keep_text);
  }
  DeltaRelay& relay() { return relay_; }
  Consumer& consumer() { return consumer_; }

 private:
  Consumer consumer_;
  DeltaRelay relay_;
};

template <class T>
py::bytes struct_bytes(const T& v) {
  return py::bytes(reinterpret_cast<const char*>(&v), sizeof v);
}

// struct module format code of a wire field's (element) type.
template <class T>
constexpr char struct_code() {
  using E = std::remove_all_extents_t<T>;
  if constexpr (std::is_same_v<E, uint64_t>) return 'Q';
  else if constexpr (std::is_same_v<E, int64_t>) return 'q';
  else if constexpr (std::is_same_v<E, uint32_t>) return 'I';
  else if constexpr (std::is_same_v<E, int32_t>) return 'i';
  else if constexpr (std::is_same_v<E, float>) return 'f';
  else static_assert(sizeof(E) == 0, "wire field type without a struct code");
}

// (name, offset, struct code, count): count > 1 for array fields.
template <class T>
py::tuple field_entry(const char* name, size_t offset) {
  const size_t count = sizeof(T) / sizeof(std::remove_all_extents_t<T>);
  return py::make_tuple(name, offset, std::string(1, struct_code<T>()), count);
}

py::dict struct_entry(size_t size, const py::list& fields) {
  py::dict offsets;
  for (const auto& f : fields) offsets[f.cast<py::tuple>()[0]] = f.cast<py::tuple>()[1];
  return py::dict(py::arg("size") = size, py::arg("offsets") = offsets, py::arg("fields") = fields);
}

// Expansions of the lists in ring/wire.h (S, E and the dicts are the block's locals).
#define LS_EXPORT_FIELD(type, name, ...) fields.append(field_entry<decltype(S::name)>(#name, offsetof(S, name)));
#define LS_EXPORT_STRUCT(Name, FIELDS)         \
  {                                            \
    using S = wire::Name;                      \
    py::list fields;                           \
    FIELDS(LS_EXPORT_FIELD)                    \
    structs[#Name] = struct_entry(sizeof(S), fields); \
  }
#define LS_EXPORT_ENUMERATOR(cpp, py_name, value) d[#py_name] = uint32_t(E::cpp);
#define LS_EXPORT_ENUM(Enum, LIST, key) \
  {                                     \
    using E = wire::Enum;               \
    py::dict d;                         \
    LIST(LS_EXPORT_ENUMERATOR)          \
    out[key] = d;                       \
  }
#define LS_EXPORT_CONSTANT(cpp, py_name, value) flags[#py_name] = wire::cpp;
#define LS_EXPORT_NAME(type, name, ...) sampling.append(#name);

py::dict wire_layout() {
  py::dict out, flags, structs;
  LS_EXPORT_ENUM(RecordType, LS_WIRE_RECORD_TYPES, "record_types")
  LS_EXPORT_ENUM(FinishCode, LS_WIRE_FINISH_CODES, "finish_codes")
  LS_EXPORT_ENUM(ErrorCode, LS_WIRE_ERROR_CODES, "error_codes")
  LS_EXPORT_ENUM(Channel, LS_WIRE_CHANNELS, "channels")
  LS_EXPORT_ENUM(TranscriptKind, LS_WIRE_TRANSCRIPT_KINDS, "transcript_kinds")
  LS_EXPORT_ENUM(AdapterStatus, LS_WIRE_ADAPTER_STATUSES, "adapter_statuses")
  LS_EXPORT_ENUM(SlotAction, LS_WIRE_SLOT_ACTIONS, "slot_actions")
  LS_WIRE_FLAGS(LS_EXPORT_CONSTANT)
  LS_WIRE_STRUCTS(LS_EXPORT_STRUCT)
  {
    py::dict d;  // SegmentHeader (ring/ring.h): offsets only, Python never reads or writes it
#define LS_SEGMENT_OFFSET(f) d[#f] = offsetof(SegmentHeader, f);
    LS_SEGMENT_OFFSET(magic) LS_SEGMENT_OFFSET(version) LS_SEGMENT_OFFSET(capacity_bytes)
    LS_SEGMENT_OFFSET(max_record_bytes) LS_SEGMENT_OFFSET(creator_pid) LS_SEGMENT_OFFSET(tail) LS_SEGMENT_OFFSET(head)
    LS_SEGMENT_OFFSET(reader_waiting) LS_SEGMENT_OFFSET(closed) LS_SEGMENT_OFFSET(heartbeat_ns)
    LS_SEGMENT_OFFSET(quiet_until_ns) LS_SEGMENT_OFFSET(writer_pid) LS_SEGMENT_OFFSET(reader_pid)
#undef LS_SEGMENT_OFFSET
    structs["SegmentHeader"] = py::dict(py::arg("size") = kSegmentHeaderBytes, py::arg("offsets") = d);
  }
  py::list sampling, step_bounds, batch_bounds;
  LS_SAMPLING_SCALARS(LS_EXPORT_NAME)
  for (uint64_t b : wire::kStepTimeBoundsNs) step_bounds.append(b);
  for (uint64_t b : wire::kBatchTokenBounds) batch_bounds.append(b);
  out["sampling_scalars"] = sampling;
  out["step_time_bounds_ns"] = step_bounds;
  out["batch_token_bounds"] = batch_bounds;
  out["step_buckets"] = wire::kStepBuckets;
  out["max_choices"] = wire::kMaxChoices;
  out["max_request_adapters"] = wire::kMaxRequestAdapters;
  out["max_request_images"] = wire::kMaxRequestImages;
  out["magic"] = kMagic;
  out["version"] = kVersion;
  out["record_header_bytes"] = kRecordHeaderBytes;
  out["record_align_bytes"] = kRecordAlignBytes;
  out["flags"] = flags;
  out["structs"] = structs;
  return out;
}

py::dict decode_request_py(py::bytes payload) {
  std::string s = payload;
  wire::DecodedRequest r;
  try {
    wire::decode_request(reinterpret_cast<const uint8_t*>(s.data()), s.size(), r);
  } catch (const wire::WireError& e) {
    throw py::value_error(e.what());
  }
  py::dict d;
  const auto& p = r.sampling;
  d["request_id"] = r.request_id;
  d["max_tokens"] = r.max_tokens;
#define LS_DICT_SAMPLING_FIELD(type, name, dflt) d[#name] = p.name;
  LS_SAMPLING_SCALARS(LS_DICT_SAMPLING_FIELD)
#undef LS_DICT_SAMPLING_FIELD
  d["seed"] = p.has_seed ? py::object(py::int_(p.seed)) : py::object(py::none());
  d["ignore_eos"] = p.ignore_eos;
  d["logit_bias"] = p.logit_bias;
  d["prompt_ids"] = r.prompt_ids;
  py::list stop;
  for (auto& s : r.stop) stop.append(py::bytes(s));
  d["stop"] = stop;
  d["reasoning"] = r.reasoning.enabled()
                       ? py::object(py::make_tuple(py::bytes(r.reasoning.open), py::bytes(r.reasoning.close),
                                                   r.reasoning.starts_inside))
                       : py::object(py::none());
  d["harmony"] = py::make_tuple(r.reasoning.harmony, r.reasoning.as_content, r.reasoning.calls);
  d["num_choices"] = r.num_choices;
  d["embed"] = r.embed;
  d["prompt_lengths"] = r.prompt_lengths;
  d["num_top_logprobs"] = r.num_top_logprobs;
  d["prompt_logprobs"] = r.prompt_logprobs;
  py::list adapters;
  for (const wire::AdapterEntry& e : r.adapters) adapters.append(py::make_tuple(e.adapter_id, e.scale));
  d["adapters"] = adapters;
  py::list images;  // (pos, n_tokens, n_embd, non_causal, content_hash, float32 rows as a list)
  for (const auto& im : r.images)
    images.append(py::make_tuple(im.entry.pos, im.entry.n_tokens, im.entry.n_embd, im.entry.non_causal != 0,
                                 im.entry.content_hash, *im.embd));
  d["images"] = images;
  return d;
}

}  // namespace

PYBIND11_MODULE(_ring, m) {
  m.doc() = "laneserve shared-memory rings (SPSC byte rings, doorbells, wire-format layout)";
  py::register_local_exception<RingError>(m, "RingError", PyExc_RuntimeError);

  m.def("format_segment", &format_segment, py::arg("fd"), py::arg("segment_bytes"),
        "Reserve /dev/shm pages and write a fresh ring header; returns the data capacity in bytes.");
  m.def("segment_bytes_for", &segment_bytes_for, py::arg("capacity_bytes"));
  m.def("monotonic_ns", &monotonic_ns);
  m.def("wire_layout", &wire_layout, "Every constant, struct size and field offset of csrc/ring/wire.h.");
  m.def("sampling_defaults", [] {
    py::dict d;
    const ls::SamplingParams p;
#define LS_DEFAULT_SAMPLING_FIELD(type, name, dflt) d[#name] = p.name;
    LS_SAMPLING_SCALARS(LS_DEFAULT_SAMPLING_FIELD)
#undef LS_DEFAULT_SAMPLING_FIELD
    return d;
  }, "Defaults of the scalar sampling fields (sampler/params.h), for the Python mirror's test.");
  m.def("decode_request", &decode_request_py, "Decode a REQUEST payload exactly as a lane does (tests).");
  m.def("decode_load_adapter", [](py::bytes payload) {
    const std::string_view b = payload;
    wire::DecodedLoadAdapter out;
    try {
      wire::decode_load_adapter(reinterpret_cast<const uint8_t*>(b.data()), b.size(), out);
    } catch (const wire::WireError& e) {
      throw py::value_error(e.what());
    }
    return py::make_tuple(out.adapter_id, py::bytes(out.name), py::bytes(out.path));
  }, "Decode a LOAD_ADAPTER payload exactly as a lane does (tests).");
  m.def("json_escape", [](py::bytes text) {
    std::string out;
    wire::json_escape_append(out, std::string(text));
    return py::bytes(out);
  });
  m.def("encode_hello", [](uint32_t pid, int32_t n_ctx, int32_t n_vocab, uint64_t load_ns, uint64_t kv_bytes,
                           int32_t num_slots, int32_t max_batch_tokens, int32_t n_embd) {
    return struct_bytes(wire::HelloRecord{pid, n_ctx, n_vocab, kVersion, load_ns, kv_bytes, num_slots, max_batch_tokens,
                                          n_embd, 0});
  }, py::arg("pid"), py::arg("n_ctx"), py::arg("n_vocab"), py::arg("load_ns"), py::arg("kv_bytes"),
     py::arg("num_slots"), py::arg("max_batch_tokens"), py::arg("n_embd") = 0);
  m.def("encode_stats", [](uint64_t num_steps, uint32_t active, uint32_t waiting, uint64_t pc_bytes,
                           uint64_t pc_budget, uint32_t pc_entries, uint64_t pc_hits, uint64_t pc_hit_tokens,
                           uint64_t pc_stores, uint64_t pc_evictions, uint32_t pages_free, uint32_t pages_total,
                           uint64_t disk_reads, uint64_t disk_writes, uint64_t disk_bytes, uint64_t disk_budget) {
    wire::StatsRecord s{};
    s.num_steps = num_steps;
    s.active_sequences = active;
    s.waiting_sequences = waiting;
    s.prompt_cache_bytes = pc_bytes;
    s.prompt_cache_budget_bytes = pc_budget;
    s.prompt_cache_entries = pc_entries;
    s.prompt_cache_hits = pc_hits;
    s.prompt_cache_hit_tokens = pc_hit_tokens;
    s.prompt_cache_stores = pc_stores;
    s.prompt_cache_evictions = pc_evictions;
    s.kv_pages_free = pages_free;
    s.kv_pages_total = pages_total;
    s.prompt_cache_disk_reads = disk_reads;
    s.prompt_cache_disk_writes = disk_writes;
    s.prompt_cache_disk_bytes = disk_bytes;
    s.prompt_cache_disk_budget_bytes = disk_budget;
    return struct_bytes(s);
  }, py::arg("num_steps"), py::arg("active_sequences"), py::arg("waiting_sequences"),
     py::arg("prompt_cache_bytes"), py::arg("prompt_cache_budget_bytes"), py::arg("prompt_cache_entries"),
     py::arg("prompt_cache_hits"), py::arg("prompt_cache_hit_tokens"), py::arg("prompt_cache_stores"),
     py::arg("prompt_cache_evictions"), py::arg("kv_pages_free") = 0, py::arg("kv_pages_total") = 0,
     py::arg("prompt_cache_disk_reads") = 0, py::arg("prompt_cache_disk_writes") = 0,
     py::arg("prompt_cache_disk_bytes") = 0, py::arg("prompt_cache_disk_budget_bytes") = 0);
  m.def("encode_embedding", [](uint64_t rid, uint32_t choice, uint32_t prompt_tokens, const std::vector<float>& v) {
    const wire::EmbeddingHeader h{rid, choice, uint32_t(v.size()), prompt_tokens, 0};
    std::string out(reinterpret_cast<const char*>(&h), sizeof h);
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return py::bytes(out);
  });
  m.def("encode_done", [](uint64_t rid, uint32_t choice, uint32_t reason, uint32_t pt, uint32_t ct, uint32_t cached,
                          uint32_t flags, uint64_t pre, uint64_t dec, uint32_t stop_string) {
    return struct_bytes(wire::DoneRecord{rid, choice, reason, pt, ct, cached, flags, pre, dec, stop_string, 0});
  }, py::arg("request_id"), py::arg("choice"), py::arg("reason"), py::arg("prompt_tokens"),
     py::arg("completion_tokens"), py::arg("cached_tokens"), py::arg("flags"), py::arg("prefill_ns"),
     py::arg("decode_ns"), py::arg("stop_string") = 0);
  m.def("encode_logprobs", [](uint64_t rid, uint32_t choice, uint32_t num_prompt, uint32_t num_top,
                              const std::vector<std::pair<int32_t, float>>& entries, py::bytes content,
                              py::bytes reasoning) {
    const std::string c = content, r = reasoning;
    const uint32_t stride = num_top + 1;
    const wire::LogprobsHeader h{rid, choice, uint32_t(entries.size() / stride), num_prompt, num_top,
                                 uint32_t(c.size()), uint32_t(r.size())};
    std::string out(reinterpret_cast<const char*>(&h), sizeof h);
    for (const auto& [token, logprob] : entries) {
      const wire::LogprobEntry e{token, logprob};
      out.append(reinterpret_cast<const char*>(&e), sizeof e);
    }
    return py::bytes(out + c + r);
  }, "A LOGPROBS payload as a lane writes it (tests): entries [positions * (1 + num_top)].");
  m.def("encode_delta_header", [](uint64_t rid, uint32_t choice, uint32_t channel, uint32_t n, uint64_t emit_ns) {
    return struct_bytes(wire::DeltaHeader{rid, choice, channel, n, 0, emit_ns});
  });
  m.def("encode_error_header", [](uint64_t rid, uint32_t code) { return struct_bytes(wire::ErrorHeader{rid, code, 0}); });
  m.def("crc32", [](py::bytes b) {
    std::string s = b;
    return crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  });
  m.attr("STRESS_TYPE") = kStressType;
  m.attr("STRESS_END_TYPE") = kStressEndType;

  py::class_<RingWriter>(m, "RingWriter")
      .def(py::init<int, size_t, const std::string&, int, const std::string&>(), py::arg("fd"),
           py::arg("segment_bytes"), py::arg("bell_kind") = "none", py::arg("bell_fd") = -1,
           py::arg("bell_name") = "")
      .def("write", &RingWriter::write, py::arg("type"), py::arg("payload"))
      .def_property_readonly("max_payload_bytes", &RingWriter::max_payload_bytes)
      .def("close", &RingWriter::close)
      .def("heartbeat", [](RingWriter& w) { w.producer().heartbeat(monotonic_ns()); },
           "Write the producer's heartbeat word (a lane written in Python beats from its loop).")
      .def(
          "stress_produce",
          [](RingWriter& w, uint32_t num_streams, uint32_t records_per_stream, uint64_t seed) {
            return stress_produce(w.producer(), w.bell(), num_streams, records_per_stream, seed);
          },
          py::call_guard<py::gil_scoped_release>(), "Test producer (see ring/stress.h); returns full-ring count.");

  py::class_<RingReader>(m, "RingReader")
      .def(py::init<int, size_t>(), py::arg("fd"), py::arg("segment_bytes"))
      .def("read_batch", &RingReader::read_batch, py::arg("max_records") = 128)
      .def("pump", &RingReader::pump, py::arg("max_records") = 128, py::arg("bell_fd") = -1,
           "Relay deltas to their routes (see ring/delta_relay.h); stops at the first other record. "
           "Returns (queued, partial, control, more).")
      .def("add_route", &RingReader::add_route, py::arg("request_id"), py::arg("num_choices"), py::arg("framings"),
           py::arg("collect") = false, py::arg("keep_text") = false,
           "Register a request: framings = [(choice, channel, prefix, suffix)] or [(choice, channel, prefix, "
           "middle, suffix)] (text inserted twice); collect: non-stream text per (choice, channel); keep_text: "
           "a stream also keeps its escaped text for take_text().")
      .def("remove_route", [](RingReader& r, uint64_t rid) { return r.relay().remove_route(rid); })
      .def("set_socket", [](RingReader& r, uint64_t rid, int fd) { r.relay().set_socket(rid, fd); })
      .def("set_direct", [](RingReader& r, uint64_t rid, bool on) { r.relay().set_direct(rid, on); })
      .def("take_text", [](RingReader& r, uint64_t rid, uint32_t choice, uint32_t channel) {
             return py::bytes(r.relay().take_text(rid, choice, channel));
           }, py::arg("request_id"), py::arg("choice"), py::arg("channel") = 0)
      .def("route_stats", [](RingReader& r, uint64_t rid) {
             const DeltaRelay::RouteStats s = r.relay().route_stats(rid);
             return py::make_tuple(s.num_direct_deltas, s.first_send_ns, s.next_number);
           },
           "(direct deltas sent, CLOCK_MONOTONIC ns of the first direct send or 0, the next numbered event's number)")
      .def_property_readonly("num_routes", [](RingReader& r) { return r.relay().num_routes(); })
      .def("arm", [](RingReader& r) { return r.consumer().arm(); },
           "Arm the doorbell; True means data is already there (read again instead of sleeping).")
      .def("has_data", [](RingReader& r) { return r.consumer().has_data(); })
      .def_property_readonly("heartbeat_ns", [](RingReader& r) { return r.consumer().heartbeat_ns(); })
      .def_property_readonly("quiet_until_ns", [](RingReader& r) { return r.consumer().quiet_until_ns(); })
      .def_property_readonly("closed", [](RingReader& r) { return r.consumer().closed(); })
      .def_property_readonly("capacity_bytes", [](RingReader& r) { return r.consumer().view().capacity_bytes(); });
}
