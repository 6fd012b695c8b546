// Programmatic dependent launch (PTX ISA griddepcontrol, sm_90+). A kernel launched
// with programmatic stream serialization (deep_tile.pdl) may start while its stream predecessor
// still runs; it must wait before it touches anything the predecessor may read or write.
// Launched without it, both instructions are no-ops.
#pragma once
#include "deep_tile/common/types.cuh"

namespace deep_tile::ptx {

/// Block this thread until the grids this one depends on have completed and their memory
/// operations are visible to it. Every thread that reads or writes global memory (other than the
/// kernel parameters, tensor maps included, and L2 prefetches) calls it first.
DT_DEVICE void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/// Allow the dependent grid to be scheduled once every CTA of this grid has called this or exited
/// (a CTA's first call counts; later ones do nothing). It does not make this grid's writes
/// visible: the dependent's grid_dependency_wait still waits for this grid to complete.
DT_DEVICE void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace deep_tile::ptx
