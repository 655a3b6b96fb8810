// Stopping a run cleanly on Ctrl-C (SIGINT) or SIGTERM. A program installs the handlers once; the
// handler only records the signal (an atomic flag) and restores the default action, so a second
// signal ends the process at once. Long work calls throw_if_interrupted() at safe points (between
// measurements, in progress reports, around blocking writes): the `interrupted` error it throws
// unwinds the stack, and every GPU buffer, pinned block and temporary file is released by its
// owner's destructor. The library never installs the handlers itself. Host-only.
#pragma once

namespace gpu_basics {

/// Installs the SIGINT and SIGTERM handlers (one shot each: the handler restores the default
/// action). System calls the signal interrupts are not restarted, so a blocked open() or write()
/// returns and its caller can check for the interruption. A signal inherited as ignored stays so.
void install_interrupt_handlers();

/// The signal that has arrived since the handlers were installed (or the last clear), or 0.
[[nodiscard]] int interrupt_signal() noexcept;

/// @throws interrupted when a SIGINT or SIGTERM has arrived.
void throw_if_interrupted();

/// Forgets a signal that has arrived (for tests, and for a program that handled it).
void clear_interrupt() noexcept;

}  // namespace gpu_basics
