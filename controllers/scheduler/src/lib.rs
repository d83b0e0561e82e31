//! scheduler controller.
