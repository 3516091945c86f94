// lanes._ring: shared-memory ring access for the gateway (no runtime code linked in).
#include <pybind11/pybind11.h>

PYBIND11_MODULE(_ring, m) {
  m.doc() = "laneserve shared-memory rings";
}
