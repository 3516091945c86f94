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
//
// Harmony calls (calls): a message with a recipient `to=functions.NAME`, in its role text
// (`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`) or its channel header
// (`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`), reaches content as
// `<|channel|>commentary to=functions.NAME<|message|>ARGS<|call|>` whatever its header's order and
// constraint were, so the gateway's harmony CallFormat (gateway/features/tool_calls.py) reads one
// form; the closing <|call|> is written when another message begins (the model's own <|call|> ends
// the generation). Messages to any other recipient go nowhere, as llama.cpp drops them. Without
// calls, a message with a recipient is content like any other non-analysis message.
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
  bool calls = false;          // harmony: messages to functions.NAME reach content as calls
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
  void emit_harmony(std::string_view text, std::string& content, std::string& reasoning);
  void on_harmony_marker(std::string_view marker, std::string& content);
  void begin_harmony_message(std::string& content);
  void end_harmony_message(std::string& content);

  // Start: right after the prompt's `<|start|>assistant`, role text (" to=…") or the answer;
  // Hidden: the body of a message to a recipient other than functions.
  enum class Harmony : uint8_t { Start, Body, Header, Between, Hidden };

  std::string open_, close_;
  bool enabled_ = false;
  bool inside_ = false;
  bool skip_space_ = false;  // just after a marker: drop leading whitespace
  std::string held_;         // suffix that is a proper prefix of the marker looked for
  std::string work_;         // held_ + pushed text
  bool harmony_ = false, as_content_ = false, calls_ = false;
  bool in_call_ = false;     // harmony: content is inside a call's arguments
  Harmony state_ = Harmony::Body;
  // harmony: the current message's role and channel header text, first kMaxHeaderBytes bytes
  // (capacity reserved once); channel_at_ is where its last channel header begins (npos: none).
  std::string header_;
  size_t channel_at_ = std::string::npos;
  bool header_long_ = false;  // the header went past them (so it is no known channel or recipient)
};

}  // namespace ls
