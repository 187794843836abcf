//! Kernel expressions (nf_tables.h) as sent and as dumped: their constants, registers and verdicts, and the
//! kernel module each needs. Rules become expressions in [`super::lower`].

pub const NFT_REG_VERDICT: u32 = 0;
pub const NFT_REG_1: u32 = 1;

pub const META_MARK: u32 = 3;
pub const META_IIFNAME: u32 = 6;
pub const META_OIFNAME: u32 = 7;
pub const META_SKUID: u32 = 10;
pub const META_SKGID: u32 = 11;
pub const META_NFPROTO: u32 = 15;
pub const META_L4PROTO: u32 = 16;
pub const CT_STATE: u32 = 0;
pub const CT_MARK: u32 = 3;
pub const CT_ZONE: u32 = 17;
pub const CMP_EQ: u32 = 0;
pub const CMP_NEQ: u32 = 1;
pub const PAYLOAD_NETWORK: u32 = 1;
pub const PAYLOAD_TRANSPORT: u32 = 2;
/// nf_tables' own verdicts (`NF_DROP`, `NF_ACCEPT` are [`crate::netfilter`]'s).
pub const NFT_CONTINUE: i32 = -1;
pub const NFT_BREAK: i32 = -2;
pub const NFT_JUMP: i32 = -3;
pub const NFT_GOTO: i32 = -4;
pub const NFT_RETURN: i32 = -5;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`.
pub const NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
pub const LOOKUP_F_INV: u32 = 1;

/// Register data: a value, or a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    Value(Vec<u8>),
    Verdict { code: i32, chain: Option<String> },
}

/// One kernel expression, as sent and as dumped (after [`super::decode`] drops what dumps add).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load KEY => reg`
    Meta {
        key: u32,
        dreg: u32,
    },
    /// `meta set KEY with reg`
    MetaSet {
        key: u32,
        sreg: u32,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Payload {
        dreg: u32,
        base: u32,
        offset: u32,
        len: u32,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// A set lookup; `set` is the set's name (`__set%d` when sent), `set_id` links it to a set of the
    /// same batch.
    Lookup {
        sreg: u32,
        set: String,
        set_id: Option<u32>,
        flags: u32,
    },
    Immediate {
        dreg: u32,
        data: Data,
    },
    Counter,
    Redir {
        reg_min: u32,
        flags: u32,
    },
    Tproxy {
        family: u32,
        reg_port: u32,
    },
    /// `ct load KEY => reg`
    Ct {
        key: u32,
        dreg: u32,
    },
    /// `ct set KEY with reg`
    CtSet {
        key: u32,
        sreg: u32,
    },
    /// An expression this module does not model (from a dump): its name.
    Other(String),
}

impl Expr {
    /// The kernel's name of the expression type (`NFTA_EXPR_NAME`).
    pub fn name(&self) -> &str {
        match self {
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Payload { .. } => "payload",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Counter => "counter",
            Expr::Redir { .. } => "redir",
            Expr::Tproxy { .. } => "tproxy",
            Expr::Ct { .. } | Expr::CtSet { .. } => "ct",
            Expr::Other(n) => n,
        }
    }
}

/// The kernel module an expression needs beyond `nf_tables` itself (spec §4.8), for error messages.
pub fn module_of(e: &Expr) -> Option<&'static str> {
    match e {
        Expr::Tproxy { .. } => Some("nft_tproxy"),
        Expr::Redir { .. } => Some("nft_redir"),
        Expr::Ct { .. } | Expr::CtSet { .. } => Some("nft_ct"),
        _ => None,
    }
}
