#include "lane/lane_loop.h"

#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace ls::lane {

using wire::RecordType;

static_assert(uint32_t(FinishReason::Stop) == uint32_t(wire::FinishCode::Stop) &&
                  uint32_t(FinishReason::Length) == uint32_t(wire::FinishCode::Length) &&
                  uint32_t(FinishReason::Cancelled) == uint32_t(wire::FinishCode::Cancelled) &&
                  uint32_t(FinishReason::Error) == uint32_t(wire::FinishCode::Error),
              "engine finish reasons and wire finish codes must share values");

LaneLoop::LaneLoop(const LaneOptions& opts)
    : opts_(opts),
      requests_(ring::RingView(opts.request_fd, opts.request_segment_bytes)),
      output_(ring::RingView(opts.output_fd, opts.output_segment_bytes)),
      wake_(ring::Doorbell::semaphore(opts.wake_semaphore)),
      output_bell_(ring::Doorbell::from_spec(opts.output_bell_kind, opts.output_bell_fd, opts.output_bell_name)) {
  delta_bytes_.reserve(4096);
  pending_.reserve(64 * 1024);
}

std::string LaneLoop::load_and_run(const std::string& path, int threads, int ctx_size) {
  const uint64_t t0 = ring::monotonic_ns();
  try {
    backend_ = make_backend(path, threads, ctx_size);
  } catch (const std::exception& e) {
    fail_request(0, wire::ErrorCode::LoadFailed, e.what());
    ring_bell_if_armed();
    return "load_failed";
  }
  const wire::HelloRecord hello{uint32_t(getpid()), backend_->n_ctx(), backend_->n_vocab(), ring::kVersion,
                                ring::monotonic_ns() - t0};
  const ring::Piece piece{&hello, sizeof hello};
  emit(RecordType::Hello, &piece, 1, false);
  while (!stop_.load(std::memory_order_relaxed)) {
    drain_requests();
    const uint64_t now = ring::monotonic_ns();
    if (active_) step_active(now);
    housekeeping(now);
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
        if (active_ && c.request_id == req_.request_id) {
          backend_->cancel();
          finish_choice(wire::FinishCode::Cancelled);
        }
        break;
      }
      case RecordType::Shutdown:
        exit_reason_ = "shutdown";
        stop();
        break;
      default:
        fail_request(0, wire::ErrorCode::ProtocolError, "unexpected record type on the request ring");
    }
  });
}

void LaneLoop::begin_request(const uint8_t* payload, size_t size_bytes) {
  uint64_t incoming_id = 0;
  if (size_bytes >= 8) std::memcpy(&incoming_id, payload, 8);
  if (active_) {  // the gateway admits one request per lane; refuse rather than drop the active one
    fail_request(incoming_id, wire::ErrorCode::BadRequest, "lane is busy with another request");
    return;
  }
  try {
    wire::decode_request(payload, size_bytes, req_);
  } catch (const wire::WireError& e) {
    fail_request(incoming_id, wire::ErrorCode::ProtocolError, e.what());
    return;
  }
  active_ = true;
  request_pending_start_ = pending_.size();
  start_choice(0);
}

void LaneLoop::start_choice(uint32_t choice) {
  choice_ = choice;
  last_delta_off_ = SIZE_MAX;
  gen_.prompt_ids = req_.prompt_ids;  // copy into reused capacity
  gen_.sampling = req_.sampling;
  if (gen_.sampling.has_seed) gen_.sampling.seed += choice;  // each choice its own stream
  gen_.max_tokens = req_.max_tokens;
  gen_.stop = req_.stop;
  try {
    backend_->start(gen_);
  } catch (const std::exception& e) {
    fail_request(req_.request_id, wire::ErrorCode::BadRequest, e.what());
    return;
  }
  first_step_ = true;
}

// Phases 2 and 3: one step of the active choice, then its delta or DONE.
void LaneLoop::step_active(uint64_t now_ns) {
  if (first_step_)  // a prefill step may be long: tell hang detection how long to stay quiet
    output_.set_quiet_until(now_ns + opts_.prefill_budget_ns_per_token * gen_.prompt_ids.size());
  StepResult r;
  try {
    r = backend_->step();
  } catch (const std::exception& e) {
    if (first_step_) output_.set_quiet_until(0);
    first_step_ = false;
    fail_request(req_.request_id, wire::ErrorCode::EngineError, e.what());
    return;
  }
  // Prefill steps (no token yet) keep the hang-detection allowance; the first token ends it.
  if (r.token >= 0 || r.finished) {
    if (first_step_) output_.set_quiet_until(0);
    first_step_ = false;
  }
  if (!r.text.empty()) emit_delta(r.text, ring::monotonic_ns());
  if (active_ && r.finished) finish_choice(wire::FinishCode(uint32_t(r.reason)));
}

void LaneLoop::finish_choice(wire::FinishCode reason) {
  const GenerationStats s = backend_->stats();
  const bool last = reason == wire::FinishCode::Cancelled || choice_ + 1 >= req_.framings.size();
  const wire::DoneRecord done{req_.request_id,        choice_,           uint32_t(reason),
                              uint32_t(s.prompt_tokens), uint32_t(s.completion_tokens), uint64_t(s.prefill_ns),
                              uint64_t(s.decode_ns),  last ? wire::kDoneLastChoice : 0u, 0};
  const ring::Piece piece{&done, sizeof done};
  emit(RecordType::Done, &piece, 1, false);
  if (last) {
    active_ = false;
  } else {
    start_choice(choice_ + 1);
  }
}

void LaneLoop::fail_request(uint64_t request_id, wire::ErrorCode code, std::string_view message) {
  if (active_ && request_id == req_.request_id) {
    backend_->cancel();
    active_ = false;
  }
  const wire::ErrorHeader h{request_id, uint32_t(code), 0};
  const size_t max_message = output_.max_payload_bytes() - sizeof h;
  const ring::Piece pieces[2] = {{&h, sizeof h}, {message.data(), std::min(message.size(), max_message)}};
  emit(RecordType::Error, pieces, 2, false);
}

void LaneLoop::emit_delta(std::string_view text, uint64_t now_ns) {
  const wire::ChoiceFraming& f = req_.framings[choice_];
  delta_bytes_.clear();
  delta_bytes_ += f.prefix;
  wire::json_escape_append(delta_bytes_, text);
  delta_bytes_ += f.suffix;
  const wire::DeltaHeader h{req_.request_id, choice_, 1, now_ns};
  const ring::Piece pieces[2] = {{&h, sizeof h}, {delta_bytes_.data(), delta_bytes_.size()}};
  emit(RecordType::Delta, pieces, 2, true);
  if (active_ && pending_.size() - std::max(request_pending_start_, pending_off_) > opts_.max_pending_bytes) {
    // The gateway stopped reading: drop this request's unsent output, keep older requests'.
    pending_.resize(std::max(request_pending_start_, pending_off_));
    last_delta_off_ = SIZE_MAX;
    fail_request(req_.request_id, wire::ErrorCode::OutputOverflow,
                 "output not consumed: pending lane output passed its cap");
  }
}

// Write now if nothing is queued ahead of this record, else append to pending (merging a DELTA
// into the trailing DELTA of the same choice).
void LaneLoop::emit(RecordType type, const ring::Piece* pieces, size_t num_pieces, bool mergeable_delta) {
  if (pending_off_ == pending_.size() && output_.try_write(uint32_t(type), pieces, num_pieces)) return;
  size_t payload = 0;
  for (size_t i = 0; i < num_pieces; ++i) payload += pieces[i].size_bytes;
  if (mergeable_delta && last_delta_off_ != SIZE_MAX) {
    uint32_t old_payload;
    std::memcpy(&old_payload, pending_.data() + last_delta_off_, 4);
    const size_t extra = payload - sizeof(wire::DeltaHeader);
    if (old_payload + extra + ring::kRecordHeaderBytes <= output_.max_payload_bytes()) {
      const auto* data = static_cast<const uint8_t*>(pieces[1].data);
      pending_.insert(pending_.end(), data, data + extra);
      const uint32_t new_payload = uint32_t(old_payload + extra);
      std::memcpy(pending_.data() + last_delta_off_, &new_payload, 4);
      uint8_t* hdr = pending_.data() + last_delta_off_ + 8;
      uint32_t num_tokens;
      std::memcpy(&num_tokens, hdr + offsetof(wire::DeltaHeader, num_tokens), 4);
      ++num_tokens;
      std::memcpy(hdr + offsetof(wire::DeltaHeader, num_tokens), &num_tokens, 4);
      return;
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
  request_pending_start_ = 0;
  last_delta_off_ = SIZE_MAX;
}

void LaneLoop::ring_bell_if_armed() {
  if (output_.take_bell()) output_bell_.ring();
}

// Phase 4.
void LaneLoop::housekeeping(uint64_t now_ns) {
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
  if (active_ || stop_.load(std::memory_order_relaxed)) return;
  if (pending_off_ != pending_.size()) {
    wake_.wait(1'000'000);  // output backlog: retry soon, but still take new requests
  } else if (!requests_.arm()) {
    wake_.wait(opts_.idle_wait_ns);
  }
}

}  // namespace ls::lane
