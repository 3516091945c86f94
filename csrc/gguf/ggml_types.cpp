#include "gguf/gguf.h"

namespace ls {

const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  static const GgmlTypeInfo kUnknown = {"unknown", 0, 0};
  static const GgmlTypeInfo kF32 = {"F32", 1, 4}, kF16 = {"F16", 1, 2}, kBF16 = {"BF16", 1, 2};
  static const GgmlTypeInfo kQ4_0 = {"Q4_0", 32, 18}, kQ4_1 = {"Q4_1", 32, 20};
  static const GgmlTypeInfo kQ5_0 = {"Q5_0", 32, 22}, kQ5_1 = {"Q5_1", 32, 24};
  static const GgmlTypeInfo kQ8_0 = {"Q8_0", 32, 34}, kQ8_1 = {"Q8_1", 32, 36};
  static const GgmlTypeInfo kQ2_K = {"Q2_K", 256, 84}, kQ3_K = {"Q3_K", 256, 110};
  static const GgmlTypeInfo kQ4_K = {"Q4_K", 256, 144}, kQ5_K = {"Q5_K", 256, 176};
  static const GgmlTypeInfo kQ6_K = {"Q6_K", 256, 210}, kQ8_K = {"Q8_K", 256, 292};
  static const GgmlTypeInfo kIQ4_NL = {"IQ4_NL", 32, 18}, kIQ4_XS = {"IQ4_XS", 256, 136};
  static const GgmlTypeInfo kMXFP4 = {"MXFP4", 32, 17};
  switch (t) {
    case GgmlType::F32: return kF32;
    case GgmlType::F16: return kF16;
    case GgmlType::BF16: return kBF16;
    case GgmlType::Q4_0: return kQ4_0;
    case GgmlType::Q4_1: return kQ4_1;
    case GgmlType::Q5_0: return kQ5_0;
    case GgmlType::Q5_1: return kQ5_1;
    case GgmlType::Q8_0: return kQ8_0;
    case GgmlType::Q8_1: return kQ8_1;
    case GgmlType::Q2_K: return kQ2_K;
    case GgmlType::Q3_K: return kQ3_K;
    case GgmlType::Q4_K: return kQ4_K;
    case GgmlType::Q5_K: return kQ5_K;
    case GgmlType::Q6_K: return kQ6_K;
    case GgmlType::Q8_K: return kQ8_K;
    case GgmlType::IQ4_NL: return kIQ4_NL;
    case GgmlType::IQ4_XS: return kIQ4_XS;
    case GgmlType::MXFP4: return kMXFP4;
  }
  return kUnknown;
}

bool ggml_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
    case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  if (info.block_elems == 0) return 0;
  return size_t(n / info.block_elems) * size_t(info.block_bytes);
}

}  // namespace ls
