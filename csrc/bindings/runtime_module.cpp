// lanes._runtime: the native inference runtime.
#include "bindings/bindings.h"

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "laneserve native runtime (GGUF, quantized kernels, models, tokenizers, sampler)";
  ls::bind_cpu(m);
  ls::bind_gguf(m);
  ls::bind_tokenizer(m);
  ls::bind_sampler(m);
  ls::bind_quant(m);
  ls::bind_engine(m);
  ls::bind_batch_engine(m);
  ls::bind_lane(m);
  ls::bind_grammar(m);
  ls::bind_logprobs(m);
  ls::bind_vision(m);
}
