// JSON string escaping for the gateway's relay (and the lane tests): the one place text from
// the model becomes JSON string content.
#pragma once

#include <string>
#include <string_view>

namespace ls::wire {

// Appends `text` as JSON string content (no quotes): escapes ", \, control chars < 0x20 and
// U+2028/U+2029; invalid UTF-8 becomes \ufffd, so the result is always valid JSON.
void json_escape_append(std::string& out, std::string_view text);

}  // namespace ls::wire
