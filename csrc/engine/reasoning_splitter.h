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
//
// Harmony (gpt-oss): the output is messages `<|channel|>NAME<|message|>TEXT<|end|>`, the next one
// opened by `<|start|>assistant`. The splitter then sees those control tokens' text (the lane prints
// exactly the harmony_marker() tokens) and routes by channel: "analysis" → reasoning, any other
// channel → content (as_content: analysis too, thinking switched off). Headers, markers and the
// role text between messages go nowhere; text before the first header is content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ls {

struct ReasoningFormat {
  std::string open, close;     // both empty (and not harmony): no splitting
  bool starts_inside = false;
  bool harmony = false;        // gpt-oss channels instead of open/close markers
  bool as_content = false;     // harmony: the analysis channel is content too
  bool enabled() const { return harmony || !close.empty(); }
};

// The harmony control token texts the splitter needs to see (empty view otherwise): `text` is a
// hidden token's piece; every other control token stays hidden.
std::string_view harmony_marker(std::string_view text);

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
  void push_harmony(std::string_view text, std::string& content, std::string& reasoning);
  void emit_harmony(std::string_view text, std::string& out);  // out: the channel of inside_
  void on_harmony_marker(std::string_view marker);

  enum class Harmony : uint8_t { Body, Header, Between };

  std::string open_, close_;
  bool enabled_ = false;
  bool inside_ = false;
  bool skip_space_ = false;  // just after a marker: drop leading whitespace
  std::string held_;         // suffix that is a proper prefix of the marker looked for
  std::string work_;         // held_ + pushed text
  bool harmony_ = false, as_content_ = false;
  Harmony state_ = Harmony::Body;
  std::string header_;       // harmony: the current header's first kMaxHeaderBytes bytes
  bool header_long_ = false;  // the header went past them (so it is no known channel name)
};

}  // namespace ls
