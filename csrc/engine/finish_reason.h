// Why a choice ended: one list for the engine (FinishReason), the ring wire's DONE records
// (wire::FinishCode is this enum) and the names the gateway shows clients (exported with the wire
// layout as lanes.wire.FINISH_CODES).
#pragma once

#include <cstdint>

#define LS_FINISH_REASONS(X) \
  X(None, none, 0) X(Stop, stop, 1) X(Length, length, 2) X(Cancelled, cancelled, 3) X(Error, error, 4)

namespace ls {

#define LS_FINISH_DECLARE(cpp, py, value) cpp = value,
enum class FinishReason : uint32_t { LS_FINISH_REASONS(LS_FINISH_DECLARE) };
#undef LS_FINISH_DECLARE

const char* finish_reason_name(FinishReason r);  // "" for None, else the list's name ("stop", ...)

}  // namespace ls
