//! The book's generated reference pages: every flag of a command line from its clap definition,
//! and every field of the custom resources from their generated schemas. `evictord docs flags`,
//! `evictord docs crds` and `kubectl evictord docs` print them; `make reference` writes them into
//! `docs/src/reference/`, and `tests/docs_book.rs` fails when a committed page drifts from the
//! code (as the chart's CRD file does).

use std::fmt::Write as _;

use clap::Command;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};

/// The first line of every generated page: how to regenerate it.
pub const GENERATED: &str = "<!-- Generated from the code by `make reference`; do not edit. -->";

/// A Markdown page of every (visible) subcommand of `cmd` and its flags and arguments: one
/// section a command, one table row a flag (name and value, default, environment variable,
/// help).
pub fn flags_markdown(title: &str, cmd: &Command) -> String {
    // Built, as clap builds it before parsing: a `SetTrue` flag gets its arity and its `false`
    // default only then.
    let mut cmd = cmd.clone();
    cmd.build();
    let mut out = format!("{GENERATED}\n\n# {title}\n");
    let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
    command_section(&mut out, &cmd, &path, true);
    out
}

fn command_section(out: &mut String, cmd: &Command, path: &str, root: bool) {
    let _ = write!(out, "\n## `{path}`\n\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", one_paragraph(&about.to_string()));
    }
    let args: Vec<_> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        // A global flag is listed once, with the command that declares it.
        .filter(|a| root || !a.is_global_set())
        .collect();
    if args.is_empty() {
        out.push_str("No flags of its own.\n");
    } else {
        out.push_str("| flag | default | environment | what |\n|---|---|---|---|\n");
        for a in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                flag_cell(a),
                code_list(a.get_default_values().iter().map(|v| v.to_string_lossy())),
                a.get_env()
                    .map(|e| format!("`{}`", e.to_string_lossy()))
                    .unwrap_or_default(),
                cell(
                    &a.get_long_help()
                        .or(a.get_help())
                        .map(|h| h.to_string())
                        .unwrap_or_default()
                ),
            );
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        command_section(out, sub, &format!("{path} {}", sub.get_name()), false);
    }
}

/// `--long <VALUE>`, `-s`, a positional `<NAME>`, with the values a value enum accepts.
fn flag_cell(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first().map(ToString::to_string))
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase().replace('-', "_"));
    let takes_value = a.get_num_args().is_none_or(|n| n.takes_values());
    let mut names = Vec::new();
    if let Some(l) = a.get_long() {
        names.push(if takes_value {
            format!("`--{l} <{value}>`")
        } else {
            format!("`--{l}`")
        });
    }
    if let Some(s) = a.get_short() {
        names.push(format!("`-{s}`"));
    }
    if names.is_empty() {
        names.push(format!("`<{value}>`"));
    }
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| p.get_name().to_string())
        .collect();
    // A boolean flag's possible values (true, false) say nothing a reader needs.
    if possible.is_empty() || possible == ["true", "false"] {
        names.join(", ")
    } else {
        format!(
            "{} (one of {})",
            names.join(", "),
            code_list(possible.into_iter())
        )
    }
}

/// A page of every field of the custom resources, a section a kind: its group, scope and names,
/// then one row a field (path, type, required, description), `[]` marking the items of a list.
pub fn crds_markdown(crds: &[CustomResourceDefinition]) -> String {
    let mut out = format!(
        "{GENERATED}\n\n# Custom resources\n\nEvery field of the custom resources evictord serves, \
         from the schemas `evictord crds` prints (the chart's CRD file). A field marked required \
         must be set when the object is written.\n"
    );
    for crd in crds {
        let s = &crd.spec;
        let _ = write!(
            out,
            "\n## {}\n\n`{}`, {}; plural `{}`{}.\n",
            s.names.kind,
            s.group,
            s.scope,
            s.names.plural,
            s.names
                .short_names
                .as_ref()
                .filter(|n| !n.is_empty())
                .map(|n| format!(", short names {}", code_list(n.iter())))
                .unwrap_or_default()
        );
        for v in &s.versions {
            let _ = writeln!(out, "\n### {}/{}\n", s.group, v.name);
            let Some(schema) = v
                .schema
                .as_ref()
                .and_then(|x| x.open_api_v3_schema.as_ref())
            else {
                out.push_str("No schema.\n");
                continue;
            };
            out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
            let mut rows = Vec::new();
            for (name, prop) in schema.properties.iter().flatten() {
                if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let required = is_required(schema, name);
                field_rows(&mut rows, name, prop, required);
            }
            for (path, ty, required, description) in rows {
                let _ = writeln!(
                    out,
                    "| `{path}` | {ty} | {} | {} |",
                    if required { "yes" } else { "" },
                    cell(&description)
                );
            }
        }
    }
    out
}

type Row = (String, String, bool, String);

fn field_rows(rows: &mut Vec<Row>, path: &str, p: &JSONSchemaProps, required: bool) {
    rows.push((
        path.to_string(),
        type_of(p),
        required,
        p.description.clone().unwrap_or_default(),
    ));
    for (name, child) in p.properties.iter().flatten() {
        field_rows(rows, &format!("{path}.{name}"), child, is_required(p, name));
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &p.items {
        for (name, child) in items.properties.iter().flatten() {
            field_rows(
                rows,
                &format!("{path}[].{name}"),
                child,
                is_required(items, name),
            );
        }
    }
}

fn is_required(parent: &JSONSchemaProps, name: &str) -> bool {
    parent.required.iter().flatten().any(|r| r == name)
}

fn type_of(p: &JSONSchemaProps) -> String {
    let base = match (p.type_.as_deref(), p.format.as_deref()) {
        (Some("array"), _) => match &p.items {
            Some(JSONSchemaPropsOrArray::Schema(items)) => format!("list of {}", type_of(items)),
            _ => "list".to_string(),
        },
        (Some(t), Some(f)) => format!("{t} ({f})"),
        (Some(t), None) => t.to_string(),
        (None, _) if p.x_kubernetes_int_or_string == Some(true) => "integer or string".into(),
        (None, _) => "any".to_string(),
    };
    match &p.enum_ {
        Some(values) if !values.is_empty() => format!(
            "{base}: {}",
            code_list(values.iter().map(|v| match &v.0 {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }))
        ),
        _ => base,
    }
}

/// Items as inline code, comma-separated.
fn code_list<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    items
        .map(|i| format!("`{}`", i.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Text as one table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    one_paragraph(text).replace('|', "\\|")
}

/// Text as one paragraph of Markdown: one line, and `<`, `>` escaped so that a placeholder such
/// as `<time>` in a help text is shown, not taken for an HTML tag.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("tool")
            .about("A tool.")
            .arg(
                Arg::new("kubeconfig")
                    .long("kubeconfig")
                    .help("Path | file"),
            )
            .subcommand(
                Command::new("run")
                    .about("Run it.")
                    .arg(
                        Arg::new("mode")
                            .long("mode")
                            .value_parser(["off", "on"])
                            .default_value("on")
                            .env("TOOL_MODE")
                            .help("The\n  mode <m>."),
                    )
                    .arg(Arg::new("dry").long("dry").action(ArgAction::SetTrue))
                    .arg(Arg::new("secret").long("secret").hide(true))
                    .arg(Arg::new("nodes").num_args(0..)),
            )
            .subcommand(Command::new("hidden").hide(true))
    }

    #[test]
    fn every_visible_command_and_flag_is_a_row() {
        let page = flags_markdown("Flags of tool", &cli());
        assert!(page.starts_with(GENERATED), "{page}");
        assert!(page.contains("\n## `tool`\n\nA tool.\n"), "{page}");
        assert!(
            page.contains("| `--kubeconfig <KUBECONFIG>` |  |  | Path \\| file |"),
            "{page}"
        );
        assert!(page.contains("\n## `tool run`\n"), "{page}");
        assert_eq!(
            page.matches("--kubeconfig").count(),
            1,
            "a global flag is listed once: {page}"
        );
        assert!(
            page.contains(
                "| `--mode <MODE>` (one of `off`, `on`) | `on` | `TOOL_MODE` | The mode &lt;m&gt;. |"
            ),
            "{page}"
        );
        assert!(page.contains("| `--dry` | `false` |  |  |"), "{page}");
        assert!(page.contains("| `<NODES>` |"), "{page}");
        assert!(!page.contains("secret"), "a hidden flag is listed: {page}");
        assert!(
            !page.contains("hidden"),
            "a hidden command is listed: {page}"
        );
    }

    #[test]
    fn every_field_of_every_crd_is_a_row() {
        let page = crds_markdown(&crate::api::all_crds());
        for kind in ["EvictionRequest", "NodeMaintenance", "EvictionInterceptor"] {
            assert!(page.contains(&format!("\n## {kind}\n")), "{kind}: {page}");
        }
        for row in [
            "| `spec.target.pod.name` |",
            "| `status.interceptors[].heartbeatTime` |",
            "| `spec.serviceAccounts` |",
        ] {
            assert!(page.contains(row), "{row}: {page}");
        }
        assert!(!page.contains("| `metadata"), "{page}");
    }
}
