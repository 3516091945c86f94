// ReasoningSplitter: splits one sequence's generated text into reasoning and content by the
// model's own markers (Qwen3 / DeepSeek-R1: "<think>" … "</think>"), as the text streams.
//
// Text between open and close marker is reasoning, the rest content; the markers themselves are
// dropped, and so is whitespace right after a marker (the "\n" / "\n\n" templates put there).
// A suffix that could begin the marker being looked for is held back (like StopMatcher), so a
// marker split across tokens never leaks into either channel; flush() releases it at the end.
// Several blocks are split the same way. starts_inside: the generation prompt already opened the
// block (the template put the open marker into it), so text is reasoning until the close marker.
// Per-sequence state; buffers keep their capacity across reset(), nothing allocates per token
// once they reached the marker length.
#pragma once

#include <string>
#include <string_view>

namespace ls {

struct ReasoningFormat {
  std::string open, close;     // both empty: no splitting
  bool starts_inside = false;
  bool enabled() const { return !close.empty(); }
};

class ReasoningSplitter {
 public:
  void reset(const ReasoningFormat& format);
  bool enabled() const { return enabled_; }
  bool inside() const { return inside_; }
  // Appends the decided part of `text` (complete UTF-8) to content / reasoning.
  void push(std::string_view text, std::string& content, std::string& reasoning);
  // End of generation: a held-back partial marker is text of the current channel.
  void flush(std::string& content, std::string& reasoning);

 private:
  void emit(std::string_view text, std::string& content, std::string& reasoning);

  std::string open_, close_;
  bool enabled_ = false;
  bool inside_ = false;
  bool skip_space_ = false;  // just after a marker: drop leading whitespace
  std::string held_;         // suffix that is a proper prefix of the marker looked for
  std::string work_;         // held_ + pushed text
};

}  // namespace ls
