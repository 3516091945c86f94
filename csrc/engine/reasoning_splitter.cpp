#include "engine/reasoning_splitter.h"

namespace ls {

void ReasoningSplitter::reset(const ReasoningFormat& format) {
  open_.assign(format.open);
  close_.assign(format.close);
  enabled_ = format.enabled();
  inside_ = enabled_ && format.starts_inside;
  skip_space_ = inside_;
  held_.clear();
  work_.clear();
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
  emit(work_, content, reasoning);
}

}  // namespace ls
