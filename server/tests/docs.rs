//! The documentation's commands, checked without running them.

/// Every shell line of `doc` (a backslash continues a line), from its ```sh blocks.
fn shell_commands(doc: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut current = String::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(std::mem::take(&mut current));
            }
        }
    }
    commands
}

/// grpcurl leaves out every field at its default value unless told otherwise: a failed
/// action's `"ok": false` would not show. Every call of an rpc in the docs asks for them.
#[test]
fn grpcurl_calls_in_the_docs_emit_defaults() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut calls = 0;
    for file in ["README.md", "docs/ops.md"] {
        let doc = std::fs::read_to_string(root.join(file)).unwrap();
        for command in shell_commands(&doc) {
            // A call names an rpc (`browserpool.v1.Service/Method`); `list` and `describe` do not.
            let calls_rpc = command.contains("grpcurl") && command.contains("browserpool.v1.") && {
                let rpc = command.split("browserpool.v1.").nth(1).unwrap_or("");
                rpc.split_whitespace().next().is_some_and(|r| r.contains('/'))
            };
            if calls_rpc {
                calls += 1;
                assert!(command.contains(" -emit-defaults "), "{file}: no -emit-defaults in: {command}");
            }
        }
    }
    assert!(calls > 20, "the docs' grpcurl calls were not found ({calls})");
}
