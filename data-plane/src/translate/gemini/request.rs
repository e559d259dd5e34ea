//! A Gemini `generateContent` body read into the internal request and
//! written from it. The model is in the path, never in the body. Read:
//! `contents`, `systemInstruction`, `tools[].functionDeclarations`
//! (`parametersJsonSchema`, or `parameters` in Gemini's schema subset),
//! `toolConfig.functionCallingConfig` and `generationConfig` (limits,
//! sampling, stop sequences, JSON output, `thinkingConfig`). Dropped and
//! noted: Google's own tools (search, code execution), `safetySettings`,
//! `cachedContent` and generation settings no other dialect has.

use serde_json::{Map, Value, json};

use super::parts::{Reader, Writer};
use crate::translate::{
    Dropped, TranslateError,
    ir::{Effort, Message, Part, Reasoning, Request, ResponseFormat, Role, Tool, ToolChoice},
};

/// Request fields read here; the rest is noted as dropped.
const HANDLED: &[&str] =
    &["contents", "systemInstruction", "system_instruction", "tools", "toolConfig", "generationConfig", "model"];

/// `body`, a Gemini request, as the internal form (`model` and `stream`
/// are the caller's: Gemini names them in the path). Fails when the body
/// is not an object or `contents` is not an array of contents.
pub fn decode_request(body: &Value) -> Result<(Request, Dropped), TranslateError> {
    let fields = body.as_object().ok_or(TranslateError::NotAnObject)?;
    let mut dropped = Dropped::new();
    let mut reader = Reader::new("call_");
    let mut request = Request::default();
    let system = fields.get("systemInstruction").or_else(|| fields.get("system_instruction"));
    request.system = match system {
        Some(Value::String(text)) => vec![Part::Text { text: text.clone(), cache: None }],
        Some(content) => reader.parts(content.get("parts"), &mut dropped),
        None => Vec::new(),
    };
    let contents = match fields.get("contents") {
        Some(Value::Array(contents)) => contents.as_slice(),
        None | Some(Value::Null) => &[],
        Some(_) => return Err(invalid("contents", "must be an array of contents")),
    };
    for (turn, content) in contents.iter().enumerate() {
        if !content.is_object() {
            return Err(invalid("contents", "each content must be an object"));
        }
        let role = match content.get("role").and_then(Value::as_str) {
            Some("model") => Role::Assistant,
            _ => Role::User,
        };
        // Ids stay the same however many turns follow: a translated
        // history keeps matching the upstream's prompt cache.
        reader.set_prefix(format!("call_{turn}_"));
        let parts = reader.parts(content.get("parts"), &mut dropped);
        // A turn of nothing but empty texts says nothing; providers refuse
        // empty turns.
        if !parts.is_empty() {
            request.messages.push(Message { role, parts });
        }
    }
    for tool in fields.get("tools").and_then(Value::as_array).into_iter().flatten() {
        let Some(declarations) = tool.get("functionDeclarations").and_then(Value::as_array) else {
            dropped.note("server_tool");
            continue;
        };
        for declaration in declarations {
            request.tools.push(read_tool(declaration));
        }
    }
    if let Some(config) = fields.get("toolConfig").and_then(|c| c.get("functionCallingConfig")) {
        request.tool_choice = read_tool_choice(config, &mut dropped);
    }
    if let Some(config) = fields.get("generationConfig").and_then(Value::as_object) {
        read_generation_config(config, &mut request, &mut dropped);
    }
    for key in fields.keys().filter(|key| !HANDLED.contains(&key.as_str())) {
        dropped.note(match key.as_str() {
            "safetySettings" => "safety_settings",
            "cachedContent" => "cached_content",
            "labels" => "labels",
            _ => "unknown_field",
        });
    }
    Ok((request, dropped))
}

fn invalid(field: &str, reason: &'static str) -> TranslateError {
    TranslateError::Invalid { field: field.to_owned(), reason }
}

/// A function declaration as a tool; Gemini's OpenAPI-style `parameters`
/// get JSON schema's lower-case type names.
fn read_tool(declaration: &Value) -> Tool {
    let parameters = match (declaration.get("parametersJsonSchema"), declaration.get("parameters")) {
        (Some(schema @ Value::Object(_)), _) => schema.clone(),
        (_, Some(schema @ Value::Object(_))) => lower_types(schema),
        _ => json!({ "type": "object", "properties": {} }),
    };
    Tool {
        name: declaration.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
        description: declaration.get("description").and_then(Value::as_str).map(str::to_owned),
        parameters,
    }
}

/// `schema` with every `type` name in lower case (`OBJECT` → `object`).
fn lower_types(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("type", Value::String(name)) => (key.clone(), Value::String(name.to_ascii_lowercase())),
                    _ => (key.clone(), lower_types(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(lower_types).collect()),
        other => other.clone(),
    }
}

/// `functionCallingConfig` as a tool choice: `ANY` restricted to one
/// function is that function; to several, any tool (the restriction is
/// noted as dropped).
fn read_tool_choice(config: &Value, dropped: &mut Dropped) -> Option<ToolChoice> {
    let allowed: Vec<&str> = config
        .get("allowedFunctionNames")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match config.get("mode").and_then(Value::as_str)? {
        "NONE" => Some(ToolChoice::None),
        "ANY" if allowed.len() == 1 => Some(ToolChoice::Tool(allowed[0].to_owned())),
        "ANY" => {
            if !allowed.is_empty() {
                dropped.note("tool_choice");
            }
            Some(ToolChoice::Required)
        }
        _ => Some(ToolChoice::Auto),
    }
}

fn read_generation_config(config: &Map<String, Value>, request: &mut Request, dropped: &mut Dropped) {
    let mut json_output = false;
    let mut schema = None;
    for (key, value) in config {
        match key.as_str() {
            "maxOutputTokens" => request.max_tokens = value.as_i64(),
            "temperature" => request.temperature = value.as_f64(),
            "topP" => request.top_p = value.as_f64(),
            "topK" => request.top_k = value.as_i64(),
            "stopSequences" => {
                request.stop =
                    value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
            }
            "responseMimeType" => json_output = value.as_str() == Some("application/json"),
            "responseJsonSchema" | "_responseJsonSchema" => schema = Some(value.clone()),
            "responseSchema" => schema = schema.or_else(|| Some(lower_types(value))),
            "thinkingConfig" => request.reasoning = read_thinking(value),
            "seed" => dropped.note("seed"),
            "presencePenalty" => dropped.note("presence_penalty"),
            "frequencyPenalty" => dropped.note("frequency_penalty"),
            "candidateCount" => dropped.note("candidate_count"),
            "responseLogprobs" | "logprobs" => dropped.note("logprobs"),
            "responseModalities" => dropped.note("response_modalities"),
            _ => dropped.note("generation_config"),
        }
    }
    request.response_format = match (json_output, schema) {
        (true, Some(schema)) => Some(ResponseFormat::Schema { name: "response".into(), schema, strict: false }),
        (true, None) => Some(ResponseFormat::Json),
        (false, Some(_)) => {
            dropped.note("response_schema");
            None
        }
        (false, None) => None,
    };
}

/// `thinkingConfig` as reasoning: a budget of 0 turns it off, -1 (dynamic)
/// or none leaves the provider's default, a level is an effort.
fn read_thinking(config: &Value) -> Option<Reasoning> {
    if let Some(level) = config.get("thinkingLevel").and_then(Value::as_str) {
        return Effort::parse(&level.to_ascii_lowercase()).map(Reasoning::Effort);
    }
    match config.get("thinkingBudget").and_then(Value::as_i64) {
        Some(0) => Some(Reasoning::Off),
        Some(budget) if budget > 0 => Some(Reasoning::Budget(budget)),
        _ => None,
    }
}

/// `request` as a Gemini body (no `model`: it goes in the path). Dropped
/// and noted: `parallel_tool_calls`, `user`, cache marks, redacted
/// thinking and the fields other dialects keep in `extra`.
pub fn encode_request(request: &Request, dropped: &mut Dropped) -> Result<Value, TranslateError> {
    let mut body = Map::new();
    let mut writer = Writer::for_requests();
    if !request.system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": writer.parts(&request.system, false, dropped) }));
    }
    let mut contents = Vec::new();
    for message in &request.messages {
        let model = message.role == Role::Assistant;
        let parts = writer.parts(&message.parts, model, dropped);
        if parts.is_empty() {
            continue;
        }
        contents.push(json!({ "role": if model { "model" } else { "user" }, "parts": parts }));
    }
    body.insert("contents".into(), Value::Array(contents));
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request.tools.iter().map(write_tool).collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));
        if let Some(choice) = &request.tool_choice {
            let config = match choice {
                ToolChoice::Auto => json!({ "mode": "AUTO" }),
                ToolChoice::None => json!({ "mode": "NONE" }),
                ToolChoice::Required => json!({ "mode": "ANY" }),
                ToolChoice::Tool(name) => json!({ "mode": "ANY", "allowedFunctionNames": [name] }),
            };
            body.insert("toolConfig".into(), json!({ "functionCallingConfig": config }));
        }
    }
    let config = generation_config(request);
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    if request.parallel_tool_calls == Some(false) {
        dropped.note("parallel_tool_calls");
    }
    if request.user.is_some() {
        dropped.note("user");
    }
    if !request.extra.is_empty() {
        dropped.note("vendor_fields");
    }
    Ok(Value::Object(body))
}

fn write_tool(tool: &Tool) -> Value {
    let mut declaration = json!({ "name": tool.name });
    if let Some(description) = &tool.description {
        declaration["description"] = json!(description);
    }
    let empty = tool.parameters.get("properties").and_then(Value::as_object).is_none_or(Map::is_empty)
        && tool.parameters.get("anyOf").is_none();
    if !empty {
        declaration["parametersJsonSchema"] = tool.parameters.clone();
    }
    declaration
}

fn generation_config(request: &Request) -> Map<String, Value> {
    let mut config = Map::new();
    if let Some(max) = request.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(top_k) = request.top_k {
        config.insert("topK".into(), json!(top_k));
    }
    if !request.stop.is_empty() {
        config.insert("stopSequences".into(), json!(request.stop));
    }
    match &request.response_format {
        Some(ResponseFormat::Json) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::Schema { schema, .. }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema.clone());
        }
        None => {}
    }
    match request.reasoning {
        Some(Reasoning::Off) => {
            config.insert("thinkingConfig".into(), json!({ "thinkingBudget": 0 }));
        }
        Some(reasoning) => {
            let budget = reasoning.budget().unwrap_or(-1);
            config.insert("thinkingConfig".into(), json!({ "thinkingBudget": budget, "includeThoughts": true }));
        }
        None => {}
    }
    config
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn gemini_cli_request() -> Value {
        json!({
            "systemInstruction": {"role": "user", "parts": [{"text": "You are a CLI."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "list files"}, {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
                {"role": "model", "parts": [
                    {"text": "checking", "thought": true},
                    {"functionCall": {"name": "ls", "args": {"path": "."}}, "thoughtSignature": "sig1"},
                ]},
                {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}}]},
            ],
            "tools": [
                {"functionDeclarations": [{"name": "ls", "description": "List", "parameters": {"type": "OBJECT", "properties": {"path": {"type": "STRING"}}}}]},
                {"googleSearch": {}},
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}},
            "generationConfig": {
                "maxOutputTokens": 1024, "temperature": 0.5, "topP": 0.9, "topK": 40,
                "stopSequences": ["END"], "responseMimeType": "application/json",
                "responseJsonSchema": {"type": "object"},
                "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": true},
                "seed": 7,
            },
            "safetySettings": [],
        })
    }

    #[test]
    fn every_field_the_internal_form_has_is_read() {
        let (request, dropped) = decode_request(&gemini_cli_request()).unwrap();
        assert_eq!(request.system, [Part::Text { text: "You are a CLI.".into(), cache: None }]);
        assert_eq!(request.messages.len(), 3);
        assert_eq!(request.messages[1].role, Role::Assistant);
        assert_eq!(
            request.messages[1].parts,
            [
                Part::Thinking { text: "checking".into(), signature: Some("sig1".into()) },
                Part::ToolCall { id: "call_1_0".into(), name: "ls".into(), arguments: json!({"path": "."}) },
            ]
        );
        assert!(matches!(&request.messages[2].parts[0], Part::ToolResult { id, .. } if id == "call_1_0"));
        assert_eq!(request.tools[0].parameters, json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        assert_eq!(request.tool_choice, Some(ToolChoice::Tool("ls".into())));
        assert_eq!(
            (request.max_tokens, request.top_k, request.stop.as_slice()),
            (Some(1024), Some(40), &["END".to_owned()][..])
        );
        assert_eq!((request.temperature, request.top_p), (Some(0.5), Some(0.9)));
        assert_eq!(request.reasoning, Some(Reasoning::Budget(2048)));
        assert!(matches!(request.response_format, Some(ResponseFormat::Schema { .. })));
        assert_eq!(dropped.names(), ["safety_settings", "seed", "server_tool"]);
    }

    #[test]
    fn a_request_survives_encoding_and_decoding() {
        let (request, _) = decode_request(&gemini_cli_request()).unwrap();
        let mut dropped = Dropped::new();
        let body = encode_request(&request, &mut dropped).unwrap();
        assert!(dropped.is_empty(), "{dropped}");
        let (again, _) = decode_request(&body).unwrap();
        assert_eq!(again, request);
        assert_eq!(
            body["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": 2048, "includeThoughts": true})
        );
        assert_eq!(
            body["contents"][2]["parts"][0],
            json!({"functionResponse": {"name": "ls", "response": {"result": "a.txt"}}})
        );
        assert!(body.get("model").is_none());
    }

    #[test]
    fn empty_texts_and_the_turns_left_empty_are_left_out() {
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "hi"}, {"text": ""}]},
            {"role": "model", "parts": [{"text": ""}]},
            {"role": "user", "parts": [{"text": "again"}]},
        ]});
        let (request, _) = decode_request(&body).unwrap();
        assert_eq!(request.messages.len(), 2);
        assert_eq!(request.messages[0].parts, [Part::Text { text: "hi".into(), cache: None }]);
    }

    #[test]
    fn levels_and_switches_of_thinking_are_read() {
        let thinking = |config: Value| read_thinking(&config);
        assert_eq!(thinking(json!({"thinkingLevel": "HIGH"})), Some(Reasoning::Effort(Effort::High)));
        assert_eq!(thinking(json!({"thinkingBudget": 0})), Some(Reasoning::Off));
        assert_eq!(thinking(json!({"thinkingBudget": -1})), None);
        let request = Request { reasoning: Some(Reasoning::Off), ..Request::default() };
        let body = encode_request(&request, &mut Dropped::new()).unwrap();
        assert_eq!(body["generationConfig"]["thinkingConfig"], json!({"thinkingBudget": 0}));
    }

    #[test]
    fn bodies_that_are_not_gemini_requests_are_refused() {
        assert_eq!(decode_request(&json!([1])).unwrap_err(), TranslateError::NotAnObject);
        assert!(matches!(decode_request(&json!({"contents": "hi"})), Err(TranslateError::Invalid { .. })));
        assert!(matches!(decode_request(&json!({"contents": [1]})), Err(TranslateError::Invalid { .. })));
    }
}
