#include "engine/reasoning_splitter.h"

#include <algorithm>

namespace ls {

namespace {

// Harmony's control texts the splitter acts on; <|return|> and <|call|> end the generation.
constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>", kEnd = "<|end|>",
                           kStart = "<|start|>", kConstrain = "<|constrain|>";
constexpr std::string_view kHarmonyMarkers[] = {kChannel, kMessage, kEnd, kStart, kConstrain};
constexpr size_t kMaxMarkerBytes = 13;  // "<|constrain|>"
constexpr std::string_view kAnalysis = "analysis", kRecipient = "to=", kFunctions = "functions.";
// Role text, channel name, recipient (up to a 64-character function name) and constraint.
constexpr size_t kMaxHeaderBytes = 160;
// The one form a call reaches content in (gateway/features/tool_calls.py reads it).
constexpr std::string_view kCallOpen = "<|channel|>commentary to=", kCallClose = "<|call|>";

// Length of the longest suffix of `text` that is a proper prefix of some harmony marker.
size_t harmony_partial(std::string_view text) {
  for (size_t keep = std::min(text.size(), kMaxMarkerBytes - 1); keep > 0; --keep) {
    const std::string_view tail = text.substr(text.size() - keep);
    for (std::string_view m : kHarmonyMarkers)
      if (keep < m.size() && m.compare(0, keep, tail) == 0) return keep;
  }
  return 0;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The text right after the prompt's `<|start|>assistant`: 1 it is role text (" to=…"), -1 it is
// not, 0 undecided yet.
int role_text(std::string_view text) {
  text = trimmed(text);
  const size_t n = std::min(text.size(), kRecipient.size());
  if (kRecipient.compare(0, n, text, 0, n) != 0) return -1;
  return n == kRecipient.size() ? 1 : 0;
}

// The recipient a header names (`to=NAME` at its start or after whitespace), empty when none.
std::string_view recipient(std::string_view header) {
  for (size_t at = header.find(kRecipient); at != std::string_view::npos; at = header.find(kRecipient, at + 1)) {
    if (at > 0 && !is_space(header[at - 1])) continue;
    std::string_view name = header.substr(at + kRecipient.size());
    size_t end = 0;
    while (end < name.size() && !is_space(name[end])) ++end;
    return name.substr(0, end);
  }
  return {};
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
  calls_ = harmony_ && format.calls;
  in_call_ = false;
  inside_ = enabled_ && !harmony_ && format.starts_inside;
  skip_space_ = inside_;
  state_ = Harmony::Start;
  header_.reserve(kMaxHeaderBytes);
  header_.clear();
  channel_at_ = std::string::npos;
  header_long_ = false;
  held_.clear();
  work_.clear();
}

void ReasoningSplitter::emit_harmony(std::string_view text, std::string& content, std::string& reasoning) {
  if (text.empty()) return;
  switch (state_) {
    case Harmony::Body:
      (inside_ ? reasoning : content).append(text);
      return;
    case Harmony::Hidden:
      return;
    case Harmony::Start: {  // held in header_ until it is known to be role text or the answer
      const size_t n = std::min(kMaxHeaderBytes - header_.size(), text.size());
      header_.append(text.substr(0, n));
      text.remove_prefix(n);
      const int role = role_text(header_);
      if (role > 0) {
        state_ = Harmony::Between;
        header_long_ = !text.empty();
        return;
      }
      if (role == 0 && text.empty()) return;
      state_ = Harmony::Body;  // not role text, or a header's worth of undecided whitespace
      content.append(header_).append(text);
      header_.clear();
      return;
    }
    default: {  // Header, Between
      const size_t room = kMaxHeaderBytes - header_.size();
      header_.append(text.substr(0, room));
      header_long_ = header_long_ || text.size() > room;
    }
  }
}

// <|message|> after a header: route the message by its channel and recipient.
void ReasoningSplitter::begin_harmony_message(std::string& content) {
  const std::string_view header(header_);
  const std::string_view to = header_long_ ? std::string_view() : recipient(header);
  state_ = Harmony::Body;
  inside_ = false;
  if (!to.empty() && calls_) {
    if (to.size() > kFunctions.size() && to.compare(0, kFunctions.size(), kFunctions) == 0) {
      content.append(kCallOpen).append(to).append(kMessage);
      in_call_ = true;
    } else {
      state_ = Harmony::Hidden;
    }
    return;
  }
  const std::string_view channel =
      channel_at_ == std::string::npos ? std::string_view() : trimmed(header.substr(channel_at_));
  inside_ = !as_content_ && !header_long_ && to.empty() && channel == kAnalysis;
}

// <|end|>, <|start|> or a header without them: the message is over, role text may follow.
void ReasoningSplitter::end_harmony_message(std::string& content) {
  if (in_call_) content.append(kCallClose);
  in_call_ = false;
  inside_ = false;
  header_.clear();
  header_long_ = false;
  channel_at_ = std::string::npos;
}

void ReasoningSplitter::on_harmony_marker(std::string_view marker, std::string& content) {
  if (state_ == Harmony::Start) state_ = Harmony::Between;  // what came before the marker was role text
  if (marker == kChannel) {
    if (state_ == Harmony::Body || state_ == Harmony::Hidden) end_harmony_message(content);
    // A second channel header before the message (gpt-oss's stray "commentary to=assistant")
    // replaces the first; the role text stays.
    if (channel_at_ != std::string::npos) {
      header_.resize(channel_at_);
      header_long_ = false;
    }
    state_ = Harmony::Header;
    emit_harmony(" ", content, content);  // "assistant to=functions.f" + "commentary": two words
    channel_at_ = header_.size();
  } else if (marker == kMessage) {
    // A message without a header (none seen since the last one) keeps the current channel.
    if (state_ != Harmony::Body && state_ != Harmony::Hidden) begin_harmony_message(content);
  } else if (marker == kConstrain) {
    // Kept as a word of the header: "to=functions.f<|constrain|>json" names f, "final <|constrain|>json"
    // and "analysis<|constrain|>" are no analysis header.
    if (state_ == Harmony::Header || state_ == Harmony::Between) {
      emit_harmony(" ", content, content);
      emit_harmony(kConstrain, content, content);
    }
  } else {  // <|end|>, <|start|>: the role text up to the next header is no message text
    end_harmony_message(content);
    state_ = Harmony::Between;
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
    emit_harmony(rest.substr(0, at), content, reasoning);
    rest.remove_prefix(at + found.size());
    on_harmony_marker(found, content);
  }
  const size_t keep = harmony_partial(rest);
  emit_harmony(rest.substr(0, rest.size() - keep), content, reasoning);
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
  work_.swap(held_);
  held_.clear();
  if (harmony_) {
    emit_harmony(work_, content, reasoning);
    if (state_ == Harmony::Start) content.append(header_);  // never decided: it was the answer
    header_.clear();
  } else if (!work_.empty()) {
    emit(work_, content, reasoning);
  }
}

}  // namespace ls
