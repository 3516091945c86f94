#include "engine/reasoning_splitter.h"

#include <algorithm>

namespace ls {

namespace {

// Harmony's control texts the splitter acts on; <|return|> and <|call|> end the generation.
constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>", kEnd = "<|end|>",
                           kStart = "<|start|>", kConstrain = "<|constrain|>";
constexpr std::string_view kHarmonyMarkers[] = {kChannel, kMessage, kEnd, kStart, kConstrain};
constexpr size_t kMaxMarkerBytes = 13;  // "<|constrain|>"
constexpr std::string_view kAnalysis = "analysis";
constexpr size_t kMaxHeaderBytes = 16;  // room for any channel name we route by

// Length of the longest suffix of `text` that is a proper prefix of some harmony marker.
size_t harmony_partial(std::string_view text) {
  for (size_t keep = std::min(text.size(), kMaxMarkerBytes - 1); keep > 0; --keep) {
    const std::string_view tail = text.substr(text.size() - keep);
    for (std::string_view m : kHarmonyMarkers)
      if (keep < m.size() && m.compare(0, keep, tail) == 0) return keep;
  }
  return 0;
}

}  // namespace

std::string_view harmony_marker(std::string_view text) {
  for (std::string_view m : kHarmonyMarkers)
    if (text == m) return m;
  return {};
}

void ReasoningSplitter::reset(const ReasoningFormat& format) {
  open_.assign(format.open);
  close_.assign(format.close);
  enabled_ = format.enabled();
  harmony_ = format.harmony;
  as_content_ = format.as_content;
  inside_ = enabled_ && !harmony_ && format.starts_inside;
  skip_space_ = inside_;
  state_ = Harmony::Body;
  header_.reserve(kMaxHeaderBytes);
  header_.clear();
  header_long_ = false;
  held_.clear();
  work_.clear();
}

void ReasoningSplitter::emit_harmony(std::string_view text, std::string& out) {
  if (text.empty()) return;
  if (state_ == Harmony::Header) {
    const size_t room = kMaxHeaderBytes - header_.size();
    header_.append(text.substr(0, room));
    header_long_ = header_long_ || text.size() > room;
  }
  if (state_ == Harmony::Body) out.append(text);
}

void ReasoningSplitter::on_harmony_marker(std::string_view marker) {
  if (marker == kChannel) {
    state_ = Harmony::Header;
    header_.clear();
    header_long_ = false;
  } else if (marker == kMessage) {
    // A message without a header (none seen since the last one) keeps the current channel.
    if (state_ == Harmony::Header) inside_ = !as_content_ && !header_long_ && header_ == kAnalysis;
    state_ = Harmony::Body;
  } else if (marker == kConstrain) {
    header_long_ = true;  // "final <|constrain|>json" is still no analysis header
  } else {  // <|end|>, <|start|>: the role text up to the next header is dropped
    state_ = Harmony::Between;
    inside_ = false;
  }
}

void ReasoningSplitter::push_harmony(std::string_view text, std::string& content, std::string& reasoning) {
  work_.assign(held_).append(text);
  held_.clear();
  std::string_view rest(work_);
  for (;;) {
    size_t at = std::string_view::npos;
    std::string_view found;
    for (std::string_view m : kHarmonyMarkers) {
      const size_t i = rest.find(m);
      if (i < at) at = i, found = m;
    }
    if (at == std::string_view::npos) break;
    emit_harmony(rest.substr(0, at), inside_ ? reasoning : content);
    rest.remove_prefix(at + found.size());
    on_harmony_marker(found);
  }
  const size_t keep = harmony_partial(rest);
  emit_harmony(rest.substr(0, rest.size() - keep), inside_ ? reasoning : content);
  held_.assign(rest.substr(rest.size() - keep));
}

void ReasoningSplitter::emit(std::string_view text, std::string& content, std::string& reasoning) {
  if (skip_space_) {
    size_t i = 0;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
    text.remove_prefix(i);
    if (text.empty()) return;
    skip_space_ = false;
  }
  (inside_ ? reasoning : content).append(text);
}

void ReasoningSplitter::push(std::string_view text, std::string& content, std::string& reasoning) {
  if (!enabled_) {
    content.append(text);
    return;
  }
  if (harmony_) {
    push_harmony(text, content, reasoning);
    return;
  }
  work_.assign(held_).append(text);
  held_.clear();
  std::string_view rest(work_);
  for (;;) {
    const std::string& marker = inside_ ? close_ : open_;
    if (marker.empty()) {  // no open marker: everything after the block is content
      emit(rest, content, reasoning);
      return;
    }
    const size_t at = rest.find(marker);
    if (at != std::string_view::npos) {
      emit(rest.substr(0, at), content, reasoning);
      rest.remove_prefix(at + marker.size());
      inside_ = !inside_;
      skip_space_ = true;
      continue;
    }
    // Hold back the longest suffix that is a proper prefix of the marker.
    size_t keep = std::min(rest.size(), marker.size() - 1);
    while (keep > 0 && rest.compare(rest.size() - keep, keep, marker, 0, keep) != 0) --keep;
    emit(rest.substr(0, rest.size() - keep), content, reasoning);
    held_.assign(rest.substr(rest.size() - keep));
    return;
  }
}

void ReasoningSplitter::flush(std::string& content, std::string& reasoning) {
  if (held_.empty()) return;
  work_.swap(held_);
  held_.clear();
  if (harmony_) {
    emit_harmony(work_, inside_ ? reasoning : content);
  } else {
    emit(work_, content, reasoning);
  }
}

}  // namespace ls
