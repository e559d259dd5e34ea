//! What the Google APIs refuse in a `generateContent` body: fields they
//! do not know (proto JSON accepts camelCase and snake_case names alike),
//! roles other than `user` and `model`, contents without parts, parts
//! without exactly one kind of data, function declarations without a name.
//! Each refusal is the message Google's error would carry.

use serde_json::Value;

/// Checks a `generateContent` body the way Google does; the refusal's
/// message when it fails.
pub(super) fn check_generate(request: &Value) -> Result<(), String> {
    const TOP: &[&str] = &[
        "contents",
        "tools",
        "toolconfig",
        "safetysettings",
        "systeminstruction",
        "generationconfig",
        "cachedcontent",
        "labels",
        "model",
    ];
    const GENERATION: &[&str] = &[
        "stopsequences",
        "responsemimetype",
        "responseschema",
        "responsejsonschema",
        "responsemodalities",
        "candidatecount",
        "maxoutputtokens",
        "temperature",
        "topp",
        "topk",
        "seed",
        "presencepenalty",
        "frequencypenalty",
        "responselogprobs",
        "logprobs",
        "enableenhancedcivicanswers",
        "speechconfig",
        "thinkingconfig",
        "mediaresolution",
        "imageconfig",
        "routingconfig",
        "audiotimestamp",
    ];
    const TOOL: &[&str] = &[
        "functiondeclarations",
        "googlesearch",
        "googlesearchretrieval",
        "codeexecution",
        "urlcontext",
        "computeruse",
        "filesearch",
        "googlemaps",
        "retrieval",
    ];
    const DECLARATION: &[&str] =
        &["name", "description", "parameters", "parametersjsonschema", "response", "responsejsonschema", "behavior"];
    known(request, TOP, "")?;
    let contents = field(request, "contents").and_then(Value::as_array);
    let contents =
        contents.filter(|c| !c.is_empty()).ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for (i, content) in contents.iter().enumerate() {
        check_content(content, &format!("contents[{i}]"))?;
        match content.get("role").and_then(Value::as_str) {
            None | Some("user" | "model" | "function") => {}
            Some(_) => return Err("Please use a valid role: user, model.".into()),
        }
    }
    if let Some(system) = field(request, "systemInstruction") {
        check_content(system, "system_instruction")?;
    }
    if let Some(config) = field(request, "generationConfig") {
        known(config, GENERATION, "generation_config")?;
    }
    for (i, tool) in field(request, "tools").and_then(Value::as_array).into_iter().flatten().enumerate() {
        known(tool, TOOL, &format!("tools[{i}]"))?;
        let declarations = field(tool, "functionDeclarations").and_then(Value::as_array);
        for (j, declaration) in declarations.into_iter().flatten().enumerate() {
            let at = format!("tools[{i}].function_declarations[{j}]");
            known(declaration, DECLARATION, &at)?;
            if declaration.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(format!("* GenerateContentRequest.{at}.name: Name cannot be empty."));
            }
        }
    }
    Ok(())
}

/// Checks one content (`role`, `parts`, each part with one kind of data).
fn check_content(content: &Value, at: &str) -> Result<(), String> {
    const PART: &[&str] = &[
        "text",
        "inlinedata",
        "filedata",
        "functioncall",
        "functionresponse",
        "executablecode",
        "codeexecutionresult",
        "thought",
        "thoughtsignature",
        "videometadata",
        "partmetadata",
        "mediaresolution",
    ];
    const DATA: &[&str] = &[
        "text",
        "inlinedata",
        "filedata",
        "functioncall",
        "functionresponse",
        "executablecode",
        "codeexecutionresult",
    ];
    known(content, &["role", "parts"], at)?;
    let parts = content.get("parts").and_then(Value::as_array).filter(|p| !p.is_empty());
    let parts =
        parts.ok_or_else(|| format!("* GenerateContentRequest.{at}.parts: contents.parts must not be empty."))?;
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.parts[{j}]");
        known(part, PART, &at)?;
        let kinds = part.as_object().into_iter().flatten().filter(|(k, _)| DATA.contains(&norm(k).as_str())).count();
        if kinds != 1 {
            return Err(format!(
                "* GenerateContentRequest.{at}.data: required oneof field 'data' must have one initialized field"
            ));
        }
    }
    Ok(())
}

/// Fails on a field of `value` not in `names` (compared without `_` and
/// case, as proto JSON accepts both spellings).
pub(super) fn known(value: &Value, names: &[&str], at: &str) -> Result<(), String> {
    let Some(object) = value.as_object() else {
        return Err(format!("Invalid value at '{at}', expected an object"));
    };
    match object.keys().find(|k| !names.contains(&norm(k).as_str())) {
        Some(name) => {
            let at = if at.is_empty() { String::new() } else { format!(" at '{at}'") };
            Err(format!("Invalid JSON payload received. Unknown name \"{name}\"{at}: Cannot find field."))
        }
        None => Ok(()),
    }
}

/// `name` (camelCase) or its snake_case spelling in `value`.
pub(super) fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let object = value.as_object()?;
    object.iter().find(|(k, _)| norm(k) == norm(name)).map(|(_, v)| v)
}

fn norm(name: &str) -> String {
    name.chars().filter(|c| *c != '_').flat_map(char::to_lowercase).collect()
}
