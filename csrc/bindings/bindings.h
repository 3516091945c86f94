// One registration function per native area; each lives in csrc/bindings/<area>_bind.cpp.
#pragma once
#include <pybind11/pybind11.h>

namespace ls {
void bind_cpu(pybind11::module_& m);
void bind_gguf(pybind11::module_& m);
void bind_tokenizer(pybind11::module_& m);
void bind_sampler(pybind11::module_& m);
void bind_quant(pybind11::module_& m);
void bind_engine(pybind11::module_& m);
void bind_batch_engine(pybind11::module_& m);  // engine_bind.cpp
void bind_lane(pybind11::module_& m);  // lane_bind.cpp
void bind_grammar(pybind11::module_& m);  // grammar_bind.cpp
void bind_logprobs(pybind11::module_& m);  // logprobs_bind.cpp
void bind_vision(pybind11::module_& m);  // vision_bind.cpp
}  // namespace ls
