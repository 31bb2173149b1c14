//! The drivers: what runs every venue through the [venue contract](crate::venue). The
//! live rx loop (`live`) reads sockets; the replay ([`replay`]) reads captures. Neither
//! names a venue kind.

pub(crate) mod live;
pub mod replay;
