// One token of a multi-sequence forward pass (ModelRuntime::forward_batch).
#pragma once

#include <cstdint>

namespace ls {

struct BatchToken {
  int32_t token;  // vocabulary id
  int32_t pos;    // position within its sequence, 0 ≤ pos < ctx_size
  int32_t seq;    // sequence slot, 0 ≤ seq < n_seq (selects the KV cache rows it writes and reads)
};

}  // namespace ls
