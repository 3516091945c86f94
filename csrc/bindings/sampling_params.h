// SamplingParams from a Python dict (keyword arguments of Engine/BatchEngine/Sampler bindings),
// generated from the field list in sampler/params.h.
#pragma once

#include <pybind11/pybind11.h>

#include "sampler/params.h"

namespace ls {

// Keys: every LS_SAMPLING_SCALARS name, seed (None = unseeded), ignore_eos, logit_bias ({id: bias}
// or [(id, bias)]). None values keep the default. strict: an unknown key raises KeyError (a typo in
// a test); otherwise other keys are ignored (they belong to the caller).
SamplingParams sampling_from_dict(const pybind11::dict& d, bool strict);

}  // namespace ls
