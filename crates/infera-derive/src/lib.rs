//! `#[derive(Refuse)]` for the launcher's error enums: every variant carries, next to its
//! `#[error("...")]` message, what the refusal is for the machine and for the user:
//!
//! ```ignore
//! #[derive(Debug, thiserror::Error, Refuse)]
//! pub enum OverlayError {
//!     #[error("the overlay directory `{dir}` does not exist")]
//!     #[refuse(code = "overlay-missing", exit = Missing, hint = "mount the overlay at {dir}")]
//!     Missing { dir: PathBuf },
//! }
//! ```
//!
//! - `code`: a string literal, or a field holding the code (`code = code`).
//! - `exit`: a variant of `::infera_core::error::Exit`.
//! - `hint`: a format string over the variant's fields (`{name}` captures a field), or any
//!   expression over them that gives a `String`; `hint_opt`: an expression giving
//!   `Option<String>`. No hint attribute: no hint.
//!
//! Each enum also gets `REFUSALS`: its literal codes with their exit codes, message and hint
//! templates, from which docs/refusals.md is generated.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Expr, Fields, Ident, Lit};

#[proc_macro_derive(Refuse, attributes(refuse))]
pub fn derive_refuse(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

enum Code {
    Lit(syn::LitStr),
    Field(Ident),
}

enum Hint {
    None,
    Format(syn::LitStr),
    Expr(Expr),
    OptExpr(Expr),
}

struct Meta {
    code: Code,
    exit: Ident,
    hint: Hint,
}

fn meta(v: &syn::Variant) -> syn::Result<Meta> {
    let attr =
        v.attrs.iter().find(|a| a.path().is_ident("refuse")).ok_or_else(|| {
            syn::Error::new_spanned(&v.ident, "every variant needs #[refuse(code = ..., exit = ...)]")
        })?;
    let (mut code, mut exit, mut hint) = (None, None, Hint::None);
    attr.parse_nested_meta(|m| {
        let value: Expr = m.value()?.parse()?;
        if m.path.is_ident("code") {
            code = Some(match value {
                Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Code::Lit(s),
                Expr::Path(p) if p.path.get_ident().is_some() => Code::Field(p.path.get_ident().cloned().unwrap()),
                other => return Err(syn::Error::new_spanned(other, "code is a string literal or a field name")),
            });
        } else if m.path.is_ident("exit") {
            exit = match value {
                Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().cloned(),
                other => return Err(syn::Error::new_spanned(other, "exit is a variant of Exit, e.g. Invalid")),
            };
        } else if m.path.is_ident("hint") {
            hint = match value {
                Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Hint::Format(s),
                other => Hint::Expr(other),
            };
        } else if m.path.is_ident("hint_opt") {
            hint = Hint::OptExpr(value);
        } else {
            return Err(m.error("expected code, exit, hint or hint_opt"));
        }
        Ok(())
    })?;
    let code = code.ok_or_else(|| syn::Error::new_spanned(attr, "missing code = ..."))?;
    let exit = exit.ok_or_else(|| syn::Error::new_spanned(attr, "missing exit = ..."))?;
    Ok(Meta { code, exit, hint })
}

/// The message template of a variant: the first literal of its `#[error("...")]`, each
/// positional `{}` named by the argument it shows (`{}`, with `names.join(", ")`, reads
/// `{names}` in the catalogue).
fn message(v: &syn::Variant) -> Option<String> {
    let attr = v.attrs.iter().find(|a| a.path().is_ident("error"))?;
    let syn::Meta::List(list) = &attr.meta else { return None };
    let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
    let args = syn::parse::Parser::parse2(parser, list.tokens.clone()).ok()?;
    let mut args = args.into_iter();
    let syn::Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) = args.next()? else { return None };
    let names: Vec<String> = args.filter(|a| !matches!(a, syn::Expr::Assign(_))).map(|a| arg_name(&a)).collect();
    Some(name_positionals(&s.value(), &names))
}

/// What a format argument shows, by name: the value it is made from (`path.display()`,
/// `names.iter().map(…)` and `if names.is_empty() {…}` show `names`; `self.0` is `0`;
/// `size.saturating_sub(1)` is `size - 1`).
fn arg_name(e: &syn::Expr) -> String {
    match e {
        syn::Expr::MethodCall(m) if m.method == "saturating_sub" && m.args.len() == 1 => {
            let by = &m.args[0];
            format!("{} - {}", arg_name(&m.receiver), quote!(#by))
        }
        syn::Expr::MethodCall(m) => arg_name(&m.receiver),
        syn::Expr::Reference(r) => arg_name(&r.expr),
        syn::Expr::Paren(p) => arg_name(&p.expr),
        syn::Expr::Unary(u) => arg_name(&u.expr),
        syn::Expr::If(i) => arg_name(&i.cond),
        syn::Expr::Call(c) if !c.args.is_empty() => arg_name(&c.args[0]),
        syn::Expr::Field(f) => match &f.member {
            syn::Member::Named(i) => i.to_string(),
            syn::Member::Unnamed(i) => i.index.to_string(),
        },
        syn::Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        other => quote!(#other).to_string().split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// `template` with its positional placeholders (`{}`, `{:?}`) named in turn.
fn name_positionals(template: &str, names: &[String]) -> String {
    let (mut out, mut next, mut chars) = (String::new(), 0, template.chars().peekable());
    while let Some(c) = chars.next() {
        if c == '{' && chars.peek() == Some(&'{') {
            out.push_str("{{");
            chars.next();
        } else if c == '{' {
            let spec: String = chars.by_ref().take_while(|c| *c != '}').collect();
            match (spec.is_empty() || spec.starts_with(':'), names.get(next)) {
                (true, Some(n)) => {
                    out.push_str(&format!("{{{n}}}"));
                    next += 1;
                }
                _ => out.push_str(&format!("{{{spec}}}")),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The pattern binding every field of the variant by name (`_0`, `_1` for tuple fields).
fn pattern(v: &syn::Variant) -> Tokens {
    let name = &v.ident;
    match &v.fields {
        Fields::Named(f) => {
            let names = f.named.iter().map(|x| x.ident.as_ref());
            quote!(Self::#name { #(#names),* })
        }
        Fields::Unnamed(f) => {
            let names = (0..f.unnamed.len()).map(|i| format_ident!("_{}", i));
            quote!(Self::#name ( #(#names),* ))
        }
        Fields::Unit => quote!(Self::#name),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let Data::Enum(data) = &input.data else {
        return Err(syn::Error::new_spanned(&input.ident, "#[derive(Refuse)] is for enums"));
    };
    let name = &input.ident;
    let (mut codes, mut exits, mut hints, mut docs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for v in &data.variants {
        let m = meta(v)?;
        let pat = pattern(v);
        if let Code::Lit(code) = &m.code {
            let exit = &m.exit;
            let message = message(v).unwrap_or_default();
            let hint = match &m.hint {
                Hint::None => quote!(None),
                Hint::Format(s) => quote!(Some(#s)),
                Hint::Expr(_) | Hint::OptExpr(_) => quote!(Some("(depends on the case)")),
            };
            docs.push(quote!(::infera_core::error::Doc { code: #code, exit: ::infera_core::error::Exit::#exit, message: #message, hint: #hint }));
        }
        codes.push(match m.code {
            Code::Lit(s) => quote!(#pat => #s),
            Code::Field(f) => quote!(#pat => #f),
        });
        let exit = m.exit;
        exits.push(quote!(#pat => ::infera_core::error::Exit::#exit));
        hints.push(match m.hint {
            Hint::None => quote!(#pat => None),
            Hint::Format(s) => quote!(#pat => Some(format!(#s))),
            Hint::Expr(e) => quote!(#pat => Some(::std::string::ToString::to_string(&(#e)))),
            Hint::OptExpr(e) => quote!(#pat => #e),
        });
    }
    Ok(quote! {
        impl #name {
            /// What each refusal of this kind is, for the catalogue (docs/refusals.md).
            pub const REFUSALS: &'static [::infera_core::error::Doc] = &[#(#docs),*];
        }
        #[allow(unused_variables, clippy::match_same_arms)]
        impl ::infera_core::error::Refuse for #name {
            fn code(&self) -> &str {
                match self { #(#codes,)* }
            }
            fn exit(&self) -> ::infera_core::error::Exit {
                match self { #(#exits,)* }
            }
            fn hint(&self) -> Option<String> {
                match self { #(#hints,)* }
            }
        }
    })
}
