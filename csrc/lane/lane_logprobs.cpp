// LOGPROBS output of the lane loop (ring/wire.h): for a request that asked for logprobs, each
// step's scored positions and the text released at that step travel in one record, so the
// gateway can put a token's text and its logprobs in the same client chunk.
#include <algorithm>

#include "lane/lane_loop.h"

namespace ls::lane {

bool LaneLoop::account_pending(uint64_t request_id, size_t queued_bytes) {
  if (queued_bytes == 0) return true;
  RequestState& st = in_flight_[request_id];
  st.pending_bytes += queued_bytes;
  if (st.pending_bytes <= opts_.max_pending_bytes) return true;
  fail_request(request_id, wire::ErrorCode::OutputOverflow, "output not consumed: pending lane output passed its cap");
  return false;
}

// A record holds as many positions as fit, the text goes with the last positions; text beyond a
// record's room (a long held-back release) continues in records without positions. Text is
// only split between code points.
void LaneLoop::emit_logprobs(const SeqEvent& ev) {
  static_assert(sizeof(wire::LogprobEntry) == sizeof(TokenLogprob), "logprob entries are copied as is");
  const size_t room = output_.max_payload_bytes() - sizeof(wire::LogprobsHeader);
  const size_t stride = ev.logprob_stride;
  const size_t position_bytes = stride * sizeof(wire::LogprobEntry);
  uint32_t positions = 0;
  std::string_view content = ev.text, reasoning = ev.reasoning;
  auto take_text = [](std::string_view& text, size_t max_bytes) {
    size_t n = std::min(text.size(), max_bytes);
    while (n < text.size() && n > 0 && (uint8_t(text[n]) & 0xC0) == 0x80) --n;
    const std::string_view head = text.substr(0, n);
    text.remove_prefix(n);
    return head;
  };
  do {
    const size_t max_positions = position_bytes ? room / position_bytes : 0;
    const uint32_t n = uint32_t(std::min<size_t>(ev.num_logprobs - positions, max_positions));
    size_t left = room - n * position_bytes;
    const bool last_positions = positions + n == ev.num_logprobs;
    const std::string_view c = last_positions ? take_text(content, left) : std::string_view{};
    left -= c.size();
    const std::string_view r = last_positions ? take_text(reasoning, left) : std::string_view{};
    const uint32_t first = positions;
    const uint32_t prompt = first < ev.num_prompt_logprobs ? std::min(n, ev.num_prompt_logprobs - first) : 0;
    const wire::LogprobsHeader h{ev.request_id, ev.choice, n, prompt, uint32_t(stride ? stride - 1 : 0),
                                 uint32_t(c.size()), uint32_t(r.size())};
    const ring::Piece pieces[4] = {{&h, sizeof h},
                                   {ev.logprobs + size_t(first) * stride, n * position_bytes},
                                   {c.data(), c.size()},
                                   {r.data(), r.size()}};
    positions += n;
    if (n == 0 && c.empty() && r.empty()) return;  // nothing (left) to say
    if (!account_pending(ev.request_id, emit(wire::RecordType::Logprobs, pieces, 4, false))) return;
  } while (positions < ev.num_logprobs || !content.empty() || !reasoning.empty());
}

}  // namespace ls::lane
