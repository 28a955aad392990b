// The CPU model: the decoder of model/model.hpp composed with the CPU backend (float for
// training, double for the finite-difference gradient check). It lives here, where a model meets
// its backend, so that model/ includes nothing of cpu/ (docs/architecture.md, "Layers").
#pragma once

#include "cpu/backend.hpp"
#include "model/model.hpp"

namespace gc::tree {

template <typename T>
using Model = BasicModel<cpu::Backend<T>>;

}  // namespace gc::tree
