// One token of a multi-sequence forward pass (ModelRuntime::forward_batch).
#pragma once

#include <cstdint>

namespace ls {

struct BatchToken {
  int32_t token;  // vocabulary id
  int32_t pos;    // position within its sequence, 0 ≤ pos < ctx_size
  int32_t seq;    // sequence slot, 0 ≤ seq < n_seq (selects the KV cache rows it writes and reads)
  // Attends to positions up to max(pos, attend_to) instead of pos: the tokens of a gemma3 image
  // see the whole image (llama.cpp decodes them non-causally). Positions beyond pos must be
  // written in the same batch (or already be in the cache). 0: causal.
  int32_t attend_to = 0;
};

}  // namespace ls
