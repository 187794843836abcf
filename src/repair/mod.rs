//! The repair agent: finds pods on this node that started without redirection and repairs them.
