#include "lane/lane_loop.h"

#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include "model/lora.h"

namespace ls::lane {

using wire::RecordType;

namespace {
uint32_t bucket(const uint64_t* bounds, uint64_t value) {
  uint32_t i = 0;
  while (i < wire::kStepBuckets - 1 && value > bounds[i]) ++i;
  return i;
}
}  // namespace

LaneLoop::LaneLoop(const LaneOptions& opts)
    : opts_(opts),
      requests_(ring::RingView(opts.request_fd, opts.request_segment_bytes)),
      output_(ring::RingView(opts.output_fd, opts.output_segment_bytes)),
      wake_(ring::Doorbell::semaphore(opts.wake_semaphore)),
      output_bell_(ring::Doorbell::from_spec(opts.output_bell_kind, opts.output_bell_fd, opts.output_bell_name)) {
  pending_.reserve(64 * 1024);
  in_flight_.reserve(1024);
  dropped_.reserve(256);
}

static_assert(wire::kMaxRequestAdapters == uint32_t(kMaxLoraPerSeq), "one limit of adapters per request");

std::string LaneLoop::load_and_run(const std::string& path, const BackendOptions& backend_opts,
                                   const std::vector<StartupAdapter>& adapters) {
  const uint64_t t0 = ring::monotonic_ns();
  try {
    backend_ = make_backend(path, backend_opts);
  } catch (const std::exception& e) {
    fail_request(0, wire::ErrorCode::LoadFailed, e.what());
    ring_bell_if_armed();
    return "load_failed";
  }
  for (const StartupAdapter& a : adapters) load_adapter(a.id, a.name, a.path);
  const wire::HelloRecord hello{uint32_t(getpid()),       backend_->n_ctx(),          backend_->n_vocab(),
                                ring::kVersion,           ring::monotonic_ns() - t0,  backend_->kv_cache_bytes(),
                                backend_->num_slots(),    backend_->max_batch_tokens(), backend_->n_embd(),
                                0};
  const ring::Piece piece{&hello, sizeof hello};
  emit(RecordType::Hello, &piece, 1, false);
  stats_dirty_ = true;  // a first STATS when idle: the prompt cache's budget is known before any work
  while (!stop_.load(std::memory_order_relaxed)) {
    drain_requests();
    const uint64_t now = ring::monotonic_ns();
    if (backend_->has_work()) step_backend(now);
    housekeeping(ring::monotonic_ns());
  }
  output_.heartbeat(ring::monotonic_ns());
  flush_pending();
  ring_bell_if_armed();
  return exit_reason_;
}

// Phase 1: requests, cancels and shutdown, in ring order.
void LaneLoop::drain_requests() {
  requests_.read(64, [&](uint32_t type, const uint8_t* p, size_t n) {
    switch (RecordType(type)) {
      case RecordType::Request:
        begin_request(p, n);
        break;
      case RecordType::Cancel: {
        wire::CancelRecord c{};
        if (n >= sizeof c) std::memcpy(&c, p, sizeof c);
        cancel_request(c.request_id);
        break;
      }
      case RecordType::Shutdown:
        exit_reason_ = "shutdown";
        stop();
        break;
      case RecordType::LoadAdapter: {
        wire::DecodedLoadAdapter la;
        try {
          wire::decode_load_adapter(p, n, la);
        } catch (const wire::WireError& e) {
          emit_adapter(la.adapter_id, wire::AdapterStatus::Failed, 0, 0, e.what());
          break;
        }
        load_adapter(la.adapter_id, la.name, la.path);  // between steps: no sequence is mid-forward
        break;
      }
      case RecordType::SlotFile:
        slot_file(p, n);  // between steps: the slot's pages are still
        break;
      case RecordType::UnloadAdapter: {
        wire::UnloadAdapterRecord u{};
        if (n >= sizeof u) std::memcpy(&u, p, sizeof u);
        unload_adapter(u.adapter_id);
        break;
      }
      default:
        fail_request(0, wire::ErrorCode::ProtocolError, "unexpected record type on the request ring");
    }
  });
}

void LaneLoop::begin_request(const uint8_t* payload, size_t size_bytes) {
  uint64_t incoming_id = 0;
  if (size_bytes >= 8) std::memcpy(&incoming_id, payload, 8);
  if (in_flight_.count(incoming_id)) {  // a reused id would mix two requests' output
    fail_request(incoming_id, wire::ErrorCode::ProtocolError, "request id already in flight on this lane");
    return;
  }
  try {
    wire::decode_request(payload, size_bytes, req_);
  } catch (const wire::WireError& e) {
    fail_request(incoming_id, wire::ErrorCode::ProtocolError, e.what());
    return;
  }
  in_flight_[req_.request_id] = RequestState{req_.num_choices, 0, 0, req_.num_top_logprobs >= 0};
  size_t offset = 0;  // embedding requests: choice i is the next prompt_lengths[i] ids
  for (uint32_t choice = 0; choice < req_.num_choices && req_.embed; ++choice) {
    const auto first = req_.prompt_ids.begin() + ptrdiff_t(offset);
    gen_.prompt_ids.assign(first, first + req_.prompt_lengths[choice]);
    offset += req_.prompt_lengths[choice];
    try {
      backend_->add_embedding(req_.request_id, choice, gen_.prompt_ids);
    } catch (const std::exception& e) {
      fail_request(req_.request_id, wire::ErrorCode::BadRequest, e.what());
      return;
    }
  }
  for (uint32_t choice = 0; choice < req_.num_choices && !req_.embed; ++choice) {
    gen_.prompt_ids = req_.prompt_ids;  // copied into the backend's queue
    gen_.sampling = req_.sampling;
    if (gen_.sampling.has_seed) gen_.sampling.seed += choice;  // each choice its own stream
    gen_.max_tokens = req_.max_tokens;
    gen_.stop = req_.stop;
    gen_.reasoning = req_.reasoning;
    gen_.grammar = req_.grammar;
    gen_.num_top_logprobs = req_.num_top_logprobs;
    gen_.prompt_logprobs = req_.prompt_logprobs;
    gen_.adapters.clear();
    for (const wire::AdapterEntry& a : req_.adapters) gen_.adapters.push_back(AdapterScale{int32_t(a.adapter_id), a.scale});
    gen_.images.clear();
    for (const auto& im : req_.images)
      gen_.images.push_back(PromptImage{int32_t(im.entry.pos), int32_t(im.entry.n_tokens), im.embd,
                                        im.entry.non_causal != 0, im.entry.content_hash});
    try {
      backend_->add(req_.request_id, choice, gen_);
    } catch (const std::exception& e) {
      fail_request(req_.request_id, wire::ErrorCode::BadRequest, e.what());
      return;
    }
  }
}

void LaneLoop::load_adapter(uint32_t id, const std::string& name, const std::string& path) {
  const uint64_t t0 = ring::monotonic_ns();
  try {
    const size_t bytes = backend_->load_adapter(int32_t(id), path);
    emit_adapter(id, wire::AdapterStatus::Loaded, bytes, ring::monotonic_ns() - t0, {});
  } catch (const std::exception& e) {
    emit_adapter(id, wire::AdapterStatus::Failed, 0, 0, "LoRA adapter '" + name + "': " + e.what());
  }
}

void LaneLoop::unload_adapter(uint32_t id) {
  if (backend_->unload_adapter(int32_t(id)))
    emit_adapter(id, wire::AdapterStatus::Unloaded, 0, 0, {});
  else
    emit_adapter(id, wire::AdapterStatus::Failed, 0, 0, "LoRA adapter " + std::to_string(id) + " is not loaded");
}

void LaneLoop::slot_file(const uint8_t* payload, size_t size_bytes) {
  const uint64_t t0 = ring::monotonic_ns();
  wire::SlotFileHeader h{};
  wire::SlotFileDoneHeader done{};
  std::string message;
  if (size_bytes >= sizeof h) std::memcpy(&h, payload, sizeof h);
  done.op_id = h.op_id;
  done.bad_request = 1;
  if (size_bytes < sizeof h || size_bytes - sizeof h < h.name_bytes) {
    message = "truncated SLOT_FILE record";
  } else {
    try {
      const std::string name(reinterpret_cast<const char*>(payload) + sizeof h, h.name_bytes);
      const SlotFileResult r = backend_->slot_file(h.action, int32_t(h.slot), name);
      done.ok = 1;
      done.n_tokens = uint64_t(r.n_tokens);
      done.n_bytes = uint64_t(r.n_bytes);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    } catch (const std::exception& e) {  // the file: a save's (the server's disk) or a restore's (the client's name)
      done.bad_request = h.action == uint32_t(wire::SlotAction::Restore);
      message = e.what();
    }
  }
  if (done.ok) done.bad_request = 0;
  done.elapsed_ns = ring::monotonic_ns() - t0;
  const size_t max_message = output_.max_payload_bytes() - sizeof done;
  const ring::Piece pieces[2] = {{&done, sizeof done}, {message.data(), std::min(message.size(), max_message)}};
  emit(RecordType::SlotFileDone, pieces, 2, false);
}

void LaneLoop::emit_adapter(uint32_t id, wire::AdapterStatus status, uint64_t bytes, uint64_t load_ns,
                            std::string_view message) {
  const wire::AdapterStatusHeader h{id, uint32_t(status), bytes, load_ns};
  const size_t max_message = output_.max_payload_bytes() - sizeof h;
  const ring::Piece pieces[2] = {{&h, sizeof h}, {message.data(), std::min(message.size(), max_message)}};
  emit(RecordType::Adapter, pieces, 2, false);
}

void LaneLoop::cancel_request(uint64_t request_id) {
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return;  // already over: its DONE/ERROR is on the way
  dropped_.clear();
  backend_->cancel(request_id, &dropped_);
  in_flight_.erase(it);
  // One DONE per dropped choice with the work it did (the gateway records and meters what a
  // cancelled or disconnected request cost); the last one ends the request.
  if (dropped_.empty()) dropped_.push_back(DroppedSeq{});  // not expected: still end the request
  for (size_t i = 0; i < dropped_.size(); ++i) {
    const DroppedSeq& d = dropped_[i];
    const wire::DoneRecord done{request_id,
                                d.choice,
                                uint32_t(wire::FinishCode::Cancelled),
                                uint32_t(d.stats.prompt_tokens),
                                uint32_t(d.stats.completion_tokens),
                                uint32_t(d.stats.cached_tokens),
                                i + 1 == dropped_.size() ? wire::kDoneLastChoice : 0u,
                                uint64_t(d.stats.prefill_ns),
                                uint64_t(d.stats.decode_ns),
                                0u,
                                0u};
    emit_done(done);
  }
}

// Phases 2 and 3: one step over every running sequence, then its deltas and DONEs.
void LaneLoop::step_backend(uint64_t now_ns) {
  // A step with a prompt chunk may be long: tell hang detection how long to stay quiet (a pure
  // decode step gets no allowance, so a lane stuck in one is caught within the heartbeat timeout).
  const uint64_t prefill_tokens = uint64_t(backend_->next_prefill_tokens());
  if (prefill_tokens) output_.set_quiet_until(now_ns + opts_.prefill_budget_ns_per_token * prefill_tokens);
  const std::vector<SeqEvent>* events = nullptr;
  try {
    events = &backend_->step();
  } catch (const std::exception& e) {
    // The engine's state is unknown: end every request on this lane.
    std::vector<uint64_t> ids;
    for (const auto& [rid, _] : in_flight_) ids.push_back(rid);
    for (uint64_t rid : ids) fail_request(rid, wire::ErrorCode::EngineError, e.what());
    output_.set_quiet_until(0);
    return;
  }
  const uint64_t end_ns = ring::monotonic_ns();
  if (prefill_tokens) output_.set_quiet_until(0);
  output_.heartbeat(end_ns);
  const uint64_t step_ns = end_ns - now_ns;
  const uint64_t tokens = uint64_t(backend_->last_batch_tokens());
  if (tokens > 0) {
    stats_.num_steps += 1;
    stats_.step_ns_sum += step_ns;
    stats_.batch_tokens_sum += tokens;
    stats_.step_ns_buckets[bucket(wire::kStepTimeBoundsNs, step_ns)] += 1;
    stats_.batch_tokens_buckets[bucket(wire::kBatchTokenBounds, tokens)] += 1;
    stats_dirty_ = true;
  }
  for (const SeqEvent& ev : *events) {
    const auto st = in_flight_.find(ev.request_id);
    if (st == in_flight_.end()) continue;  // failed meanwhile (output overflow)
    if (st->second.logprobs) {
      emit_logprobs(ev);
      if (ev.finished && in_flight_.count(ev.request_id)) finish_choice(ev);
      continue;
    }
    if (!ev.reasoning.empty()) emit_delta(ev.request_id, ev.choice, wire::Channel::Reasoning, ev.reasoning, end_ns);
    if (!ev.text.empty() && in_flight_.count(ev.request_id))
      emit_delta(ev.request_id, ev.choice, wire::Channel::Content, ev.text, end_ns);
    if (ev.embedding != nullptr && in_flight_.count(ev.request_id)) {  // an embedding's vector, before its DONE
      const wire::EmbeddingHeader h{ev.request_id, ev.choice, uint32_t(backend_->n_embd()),
                                    uint32_t(ev.stats.prompt_tokens), 0};
      const ring::Piece pieces[2] = {{&h, sizeof h}, {ev.embedding, sizeof(float) * h.n_embd}};
      emit(RecordType::Embedding, pieces, 2, false);
    }
    if (ev.finished && in_flight_.count(ev.request_id)) finish_choice(ev);
  }
}

void LaneLoop::finish_choice(const SeqEvent& ev) {
  auto it = in_flight_.find(ev.request_id);
  const bool last = ++it->second.num_done >= it->second.num_choices;
  const GenerationStats& s = ev.stats;
  const wire::DoneRecord done{ev.request_id,
                              ev.choice,
                              uint32_t(ev.reason),
                              uint32_t(s.prompt_tokens),
                              uint32_t(s.completion_tokens),
                              uint32_t(s.cached_tokens),
                              last ? wire::kDoneLastChoice : 0u,
                              uint64_t(s.prefill_ns),
                              uint64_t(s.decode_ns),
                              uint32_t(s.stop_index + 1),
                              0u};
  if (last) in_flight_.erase(it);
  emit_done(done);
}

void LaneLoop::emit_done(const wire::DoneRecord& done) {
  const ring::Piece piece{&done, sizeof done};
  emit(RecordType::Done, &piece, 1, false);
}

// ERROR always ends the request (request_id 0: about the lane itself).
void LaneLoop::fail_request(uint64_t request_id, wire::ErrorCode code, std::string_view message) {
  if (request_id != 0 && in_flight_.erase(request_id)) backend_->cancel(request_id);
  const wire::ErrorHeader h{request_id, uint32_t(code), 0};
  const size_t max_message = output_.max_payload_bytes() - sizeof h;
  const ring::Piece pieces[2] = {{&h, sizeof h}, {message.data(), std::min(message.size(), max_message)}};
  emit(RecordType::Error, pieces, 2, false);
}

void LaneLoop::emit_delta(uint64_t request_id, uint32_t choice, wire::Channel channel, std::string_view text,
                          uint64_t now_ns) {
  const size_t max_text = output_.max_payload_bytes() - sizeof(wire::DeltaHeader);
  while (!text.empty()) {  // a record holds at most max_text bytes (never split a code point)
    size_t take = std::min(text.size(), max_text);
    while (take < text.size() && take > 0 && (uint8_t(text[take]) & 0xC0) == 0x80) --take;
    const wire::DeltaHeader h{request_id, choice, uint32_t(channel), 1, 0, now_ns};
    const ring::Piece pieces[2] = {{&h, sizeof h}, {text.data(), take}};
    const size_t queued = emit(RecordType::Delta, pieces, 2, true);
    text.remove_prefix(take);
    if (queued) {
      RequestState& st = in_flight_[request_id];
      st.pending_bytes += queued;
      if (st.pending_bytes > opts_.max_pending_bytes) {
        // The gateway stopped reading: end this request (its queued records stay; the gateway
        // drops records of requests that are over).
        fail_request(request_id, wire::ErrorCode::OutputOverflow,
                     "output not consumed: pending lane output passed its cap");
        return;
      }
    }
  }
}

// Write now if nothing is queued ahead of this record, else append to pending (merging a DELTA
// into the trailing pending DELTA of the same request, choice and channel).
size_t LaneLoop::emit(RecordType type, const ring::Piece* pieces, size_t num_pieces, bool mergeable_delta) {
  if (pending_off_ == pending_.size() && output_.try_write(uint32_t(type), pieces, num_pieces)) return 0;
  size_t payload = 0;
  for (size_t i = 0; i < num_pieces; ++i) payload += pieces[i].size_bytes;
  if (mergeable_delta && last_delta_off_ != SIZE_MAX) {
    uint32_t old_payload;
    std::memcpy(&old_payload, pending_.data() + last_delta_off_, 4);
    uint8_t* hdr = pending_.data() + last_delta_off_ + 8;
    wire::DeltaHeader old;
    std::memcpy(&old, hdr, sizeof old);
    const auto* incoming = static_cast<const wire::DeltaHeader*>(pieces[0].data);
    const size_t extra = payload - sizeof(wire::DeltaHeader);
    if (old.request_id == incoming->request_id && old.choice == incoming->choice &&
        old.channel == incoming->channel && old_payload + extra <= output_.max_payload_bytes()) {
      const auto* data = static_cast<const uint8_t*>(pieces[1].data);
      pending_.insert(pending_.end(), data, data + extra);
      const uint32_t new_payload = uint32_t(old_payload + extra);
      std::memcpy(pending_.data() + last_delta_off_, &new_payload, 4);
      old.num_tokens += 1;
      std::memcpy(pending_.data() + last_delta_off_ + 8, &old, sizeof old);
      return extra;
    }
  }
  const size_t off = pending_.size();
  const uint32_t head[2] = {uint32_t(payload), uint32_t(type)};
  const auto* hb = reinterpret_cast<const uint8_t*>(head);
  pending_.insert(pending_.end(), hb, hb + sizeof head);
  for (size_t i = 0; i < num_pieces; ++i) {
    const auto* d = static_cast<const uint8_t*>(pieces[i].data);
    pending_.insert(pending_.end(), d, d + pieces[i].size_bytes);
  }
  last_delta_off_ = mergeable_delta ? off : SIZE_MAX;
  return sizeof head + payload;
}

void LaneLoop::flush_pending() {
  while (pending_off_ < pending_.size()) {
    uint32_t head[2];
    std::memcpy(head, pending_.data() + pending_off_, sizeof head);
    const ring::Piece piece{pending_.data() + pending_off_ + 8, head[0]};
    if (!output_.try_write(head[1], &piece, 1)) return;
    if (last_delta_off_ == pending_off_) last_delta_off_ = SIZE_MAX;  // sent: no more merging into it
    pending_off_ += 8 + head[0];
  }
  pending_.clear();  // keeps capacity
  pending_off_ = 0;
  last_delta_off_ = SIZE_MAX;
  for (auto& [rid, st] : in_flight_) st.pending_bytes = 0;
}

void LaneLoop::publish_stats(uint64_t now_ns) {
  last_stats_ns_ = now_ns;
  stats_dirty_ = false;
  stats_.active_sequences = uint32_t(backend_->num_active());
  stats_.waiting_sequences = uint32_t(backend_->num_waiting());
  const PromptCacheStats pc = backend_->prompt_cache_stats();
  stats_.prompt_cache_bytes = uint64_t(pc.bytes_used);
  stats_.prompt_cache_budget_bytes = uint64_t(pc.max_bytes);
  stats_.prompt_cache_hits = pc.hits;
  stats_.prompt_cache_hit_tokens = pc.hit_tokens;
  stats_.prompt_cache_stores = pc.stores;
  stats_.prompt_cache_evictions = pc.evictions;
  stats_.prompt_cache_entries = uint32_t(pc.entries);
  stats_.kv_pages_free = uint32_t(pc.pages_free);
  stats_.kv_pages_total = uint32_t(pc.pages_total);
  stats_.kv_window_pages_free = uint32_t(pc.window_pages_free);
  stats_.kv_window_pages_total = uint32_t(pc.window_pages_total);
  stats_.prompt_cache_disk_reads = pc.disk_reads;
  stats_.prompt_cache_disk_writes = pc.disk_writes;
  stats_.prompt_cache_disk_bytes = uint64_t(pc.disk_bytes_used);
  stats_.prompt_cache_disk_budget_bytes = uint64_t(pc.disk_max_bytes);
  const ring::Piece piece{&stats_, sizeof stats_};
  emit(RecordType::Stats, &piece, 1, false);
}

void LaneLoop::ring_bell_if_armed() {
  if (output_.take_bell()) output_bell_.ring();
}

// Phase 4.
void LaneLoop::housekeeping(uint64_t now_ns) {
  const bool working = backend_->has_work();
  if (stats_dirty_ && (!working || now_ns - last_stats_ns_ > wire::kStatsIntervalNs)) publish_stats(now_ns);
  flush_pending();
  output_.heartbeat(now_ns);
  ring_bell_if_armed();
  if (opts_.expected_ppid && now_ns - last_parent_check_ns_ > 100'000'000) {
    last_parent_check_ns_ = now_ns;
    if (getppid() != opts_.expected_ppid) {  // parent died (backs up PR_SET_PDEATHSIG)
      exit_reason_ = "parent_died";
      stop();
    }
  }
  if (working || stop_.load(std::memory_order_relaxed)) return;
  if (pending_off_ != pending_.size()) {
    wake_.wait(1'000'000);  // output backlog: retry soon, but still take new requests
  } else if (!requests_.arm()) {
    wake_.wait(opts_.idle_wait_ns);
  }
}

}  // namespace ls::lane
