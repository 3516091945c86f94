#include "ring/wire.h"

#include <cstring>

namespace ls::wire {

namespace {

struct Cursor {
  const uint8_t* p;
  size_t left;
  template <class T>
  T take(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  void bytes(void* dst, size_t n, const char* what) {
    if (n > left) throw WireError(std::string("REQUEST record truncated in ") + what);
    // n == 0: dst may be an empty vector's data(), a null pointer memcpy must not see (UBSan,
    // .ci/sanitize's wire fuzzer: a REQUEST without prompt ids).
    if (n) std::memcpy(dst, p, n);
    p += n;
    left -= n;
  }
  std::string str(size_t n, const char* what) {
    if (n > left) throw WireError(std::string("REQUEST record truncated in ") + what);
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return s;
  }
};

}  // namespace

void decode_request(const uint8_t* payload, size_t size_bytes, DecodedRequest& out) {
  Cursor c{payload, size_bytes};
  const auto h = c.take<RequestHeader>("header");
  if (h.num_choices == 0 || h.num_choices > kMaxChoices) throw WireError("REQUEST num_choices out of range");
  // Each count must be coverable by the remaining bytes: rejects absurd counts before allocating.
  if (uint64_t(h.num_prompt_ids) * 4 + uint64_t(h.num_logit_bias) * 8 + uint64_t(h.num_stop) * 4 > c.left)
    throw WireError("REQUEST counts exceed the record size");
  out.request_id = h.request_id;
  SamplingParams& s = out.sampling;
  s = SamplingParams{};
#define LS_DECODE_SAMPLING_FIELD(type, name, dflt) s.name = h.name;
  LS_SAMPLING_SCALARS(LS_DECODE_SAMPLING_FIELD)
#undef LS_DECODE_SAMPLING_FIELD
  s.seed = h.seed;
  s.has_seed = (h.flags & kRequestHasSeed) != 0;
  s.ignore_eos = (h.flags & kRequestIgnoreEos) != 0;
  out.max_tokens = h.max_tokens;
  out.prompt_ids.resize(h.num_prompt_ids);
  c.bytes(out.prompt_ids.data(), size_t(h.num_prompt_ids) * 4, "prompt ids");
  out.embed = (h.flags & kRequestEmbed) != 0;
  out.prompt_lengths.clear();
  if (out.embed) {
    out.prompt_lengths.resize(h.num_choices);
    c.bytes(out.prompt_lengths.data(), size_t(h.num_choices) * 4, "prompt lengths");
    uint64_t total = 0;
    for (uint32_t n : out.prompt_lengths) {
      if (n == 0) throw WireError("REQUEST embedding input of 0 tokens");
      total += n;
    }
    if (total != h.num_prompt_ids) throw WireError("REQUEST prompt lengths do not sum to num_prompt_ids");
  }
  s.logit_bias.clear();
  for (uint32_t i = 0; i < h.num_logit_bias; ++i) {
    const auto e = c.take<LogitBiasEntry>("logit_bias");
    s.logit_bias.emplace_back(e.token_id, e.bias);
  }
  out.stop.clear();
  for (uint32_t i = 0; i < h.num_stop; ++i) {
    const auto n = c.take<uint32_t>("stop length");
    out.stop.push_back(c.str(n, "stop string"));
  }
  out.reasoning = ReasoningFormat{};
  if (h.flags & kRequestSplitReasoning) {
    out.reasoning.open = c.str(c.take<uint32_t>("reasoning open length"), "reasoning open marker");
    out.reasoning.close = c.str(c.take<uint32_t>("reasoning close length"), "reasoning close marker");
    out.reasoning.starts_inside = (h.flags & kRequestReasoningStartsInside) != 0;
    if (out.reasoning.close.empty()) throw WireError("REQUEST reasoning close marker is empty");
    if (h.flags & kRequestReasoningHarmony) throw WireError("REQUEST splits by markers and harmony at once");
  }
  out.reasoning.harmony = (h.flags & kRequestReasoningHarmony) != 0;
  out.reasoning.as_content = out.reasoning.harmony && (h.flags & kRequestReasoningAsContent) != 0;
  out.reasoning.calls = out.reasoning.harmony && (h.flags & kRequestHarmonyCalls) != 0;
  out.num_top_logprobs = -1;
  out.prompt_logprobs = false;
  if (h.flags & kRequestLogprobs) {
    const auto num_top = c.take<uint32_t>("num_top_logprobs");
    if (num_top > 20) throw WireError("REQUEST num_top_logprobs above 20");
    out.num_top_logprobs = int32_t(num_top);
    out.prompt_logprobs = (h.flags & kRequestPromptLogprobs) != 0;
  } else if (h.flags & kRequestPromptLogprobs) {
    throw WireError("REQUEST prompt logprobs without logprobs");
  }
  out.grammar.clear();
  if (h.flags & kRequestGrammar) {
    out.grammar = c.str(c.take<uint32_t>("grammar length"), "grammar");
    if (out.grammar.empty()) throw WireError("REQUEST grammar is empty");
  }
  out.adapters.clear();
  if (h.flags & kRequestAdapters) {
    const auto n = c.take<uint32_t>("adapter count");
    if (n == 0 || n > kMaxRequestAdapters) throw WireError("REQUEST adapter count out of range");
    for (uint32_t i = 0; i < n; ++i) out.adapters.push_back(c.take<AdapterEntry>("adapters"));
  }
  out.images.clear();
  if (h.flags & kRequestImages) {
    const auto n = c.take<uint32_t>("image count");
    if (n == 0 || n > kMaxRequestImages) throw WireError("REQUEST image count out of range");
    for (uint32_t i = 0; i < n; ++i) out.images.push_back({c.take<ImageEntry>("images"), nullptr});
    for (auto& im : out.images) {
      const uint64_t n_floats = uint64_t(im.entry.n_tokens) * im.entry.n_embd;
      if (n_floats == 0 || n_floats * 4 > c.left) throw WireError("REQUEST image embeddings truncated or empty");
      auto embd = std::make_shared<std::vector<float>>(size_t(n_floats));
      c.bytes(embd->data(), size_t(n_floats) * 4, "image embeddings");
      im.embd = std::move(embd);
    }
  }
  out.num_choices = h.num_choices;
  if (c.left != 0) throw WireError("REQUEST record has " + std::to_string(c.left) + " trailing bytes");
}

void decode_load_adapter(const uint8_t* payload, size_t size_bytes, DecodedLoadAdapter& out) {
  Cursor c{payload, size_bytes};
  const auto h = c.take<LoadAdapterHeader>("LOAD_ADAPTER header");
  out.adapter_id = h.adapter_id;
  out.name = c.str(h.name_bytes, "adapter name");
  out.path = c.str(h.path_bytes, "adapter path");
  if (out.path.empty()) throw WireError("LOAD_ADAPTER path is empty");
}

}  // namespace ls::wire
