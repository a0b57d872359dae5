// Distributed debug levels (torch's TORCH_DISTRIBUTED_DEBUG): OFF, INFO (DDP logs its setup and
// bucket rebuilds), DETAIL (INFO, and every collective is checked across ranks before it runs:
// checked_process_group.h). Read from KILN_DISTRIBUTED_DEBUG, else TORCH_DISTRIBUTED_DEBUG.
#pragma once

#include <memory>

#include <kiln/parallel/process_group.h>

namespace kiln::dist {

enum class DebugLevel { off, info, detail };

/// The level the environment asks for (case-insensitive; unset or empty is off); an unknown value
/// fails naming the variable.
DebugLevel debug_level();

/// `group` itself, or at DETAIL a CheckedProcessGroup around it. init_process_group applies it.
std::shared_ptr<ProcessGroup> with_debug_checks(std::shared_ptr<ProcessGroup> group, DebugLevel level = debug_level());

}  // namespace kiln::dist
