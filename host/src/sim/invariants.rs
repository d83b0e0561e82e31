//! A world file's `[[invariants]]`: CEL expressions over the variables
//! `objects` and `services`, compiled when the file is read and judged
//! after every step (`when = "always"`) or once the world settled
//! (`when = "end"`).

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Context, ExecutionError, Program, Value as Cel};
use serde_json::Value;

/// The variables an invariant may name.
pub const VARIABLES: [&str; 2] = ["objects", "services"];

/// When an invariant is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Once the world is quiescent after the last fault and action.
    End,
    /// After every step.
    Always,
}

impl When {
    /// The spelling in a world file.
    pub fn as_str(self) -> &'static str {
        match self {
            When::End => "end",
            When::Always => "always",
        }
    }
}

/// One compiled invariant.
pub struct Invariant {
    /// Its name: what a failure reports as the property.
    pub name: String,
    /// The expression as written.
    pub expr: String,
    /// When it is judged.
    pub when: When,
    program: Program,
}

impl std::fmt::Debug for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invariant")
            .field("name", &self.name)
            .field("expr", &self.expr)
            .field("when", &self.when)
            .finish_non_exhaustive()
    }
}

impl Invariant {
    /// Compile `expr`; what is wrong with it otherwise. Besides its
    /// syntax, it is tried once on an empty world (`objects` of the
    /// `kinds` given, empty; `services` of the `services` given, with
    /// nothing applied), so a variable or function CEL does not know is
    /// refused here rather than at the first step.
    pub fn compile(
        name: &str,
        expr: &str,
        when: When,
        kinds: &[String],
        services: &[String],
    ) -> Result<Self, String> {
        let program = Program::compile(expr).map_err(|e| {
            format!(
                "does not compile as CEL: {}",
                e.to_string().replace('\n', " ")
            )
        })?;
        let invariant = Self {
            name: name.to_string(),
            expr: expr.to_string(),
            when,
            program,
        };
        let objects: serde_json::Map<String, Value> = kinds
            .iter()
            .map(|kind| (kind.clone(), Value::Array(Vec::new())))
            .collect();
        let services: serde_json::Map<String, Value> = services
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    serde_json::json!({ "applied": [], "resources": {} }),
                )
            })
            .collect();
        let bindings = Bindings::new(&Value::Object(objects), &Value::Object(services));
        if let Err(ExecutionError::UndeclaredReference(what)) =
            invariant.program.execute(&bindings.context())
        {
            return Err(format!(
                "names {what}, which is neither a variable ({}) nor a CEL function",
                VARIABLES.join(", ")
            ));
        }
        Ok(invariant)
    }

    /// Judge the invariant against `bindings`: `Ok` if it holds, else why
    /// not (false, not a boolean, or an evaluation error).
    pub fn judge(&self, bindings: &Bindings) -> Result<(), String> {
        // On one line, however the file wrapped it: a report's lines stay
        // lines.
        let expr = self.expr.split_whitespace().collect::<Vec<_>>().join(" ");
        match self.program.execute(&bindings.context()) {
            Ok(Cel::Bool(true)) => Ok(()),
            Ok(Cel::Bool(false)) => Err(format!("`{expr}` is false")),
            Ok(other) => Err(format!("`{expr}` gave {}, not a boolean", other.type_of())),
            Err(e) => Err(format!("`{expr}` cannot be evaluated: {e}")),
        }
    }
}

/// The values of `objects` and `services` at one moment, converted once
/// for every invariant judged then.
pub struct Bindings {
    objects: Cel,
    services: Cel,
}

impl Bindings {
    /// From their JSON form.
    pub fn new(objects: &Value, services: &Value) -> Self {
        Self {
            objects: to_cel(objects),
            services: to_cel(services),
        }
    }

    fn context(&self) -> Context<'_, '_> {
        let mut context = Context::default();
        context.add_variable_from_value("objects", self.objects.clone());
        context.add_variable_from_value("services", self.services.clone());
        context
    }
}

/// JSON as CEL: integers as `int` where they fit (so `a.epoch > 1`
/// compares without a cast), objects as maps with string keys.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<String, Cel> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            Cel::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EACH_ONCE: &str = "services.cloud.applied.all(a, services.cloud.applied.filter(b, \
         b.method == a.method && b.path == a.path && b.body == a.body).size() == 1)";

    fn world(applied: Value) -> Bindings {
        Bindings::new(
            &json!({ "buckets": [{ "name": "a", "version": 3, "value": { "spec": 1 }, "labels": {} }] }),
            &json!({ "cloud": { "applied": applied, "resources": {} } }),
        )
    }

    fn kinds() -> Vec<String> {
        vec!["buckets".into()]
    }

    fn services() -> Vec<String> {
        vec!["cloud".into()]
    }

    /// An invariant over `services.<name>.applied` holds while each effect
    /// is there once and fails, saying so, when one is there twice.
    #[test]
    fn an_invariant_over_applied_effects_catches_a_repeat() {
        let once = Invariant::compile(
            "each spec applied once",
            EACH_ONCE,
            When::End,
            &kinds(),
            &services(),
        )
        .unwrap();
        let put = json!({ "method": "PUT", "path": "/b/a", "body": { "size": 1 }, "key": "k", "epoch": 1 });
        assert_eq!(once.judge(&world(json!([put]))), Ok(()));
        let twice = once.judge(&world(json!([put, put]))).unwrap_err();
        assert!(twice.contains("is false"), "{twice}");

        let epochs = Invariant::compile(
            "epochs",
            "objects.buckets.all(o, o.version > 1) && services.cloud.applied.all(a, a.epoch >= 1)",
            When::Always,
            &kinds(),
            &services(),
        )
        .unwrap();
        assert_eq!(epochs.judge(&world(json!([put]))), Ok(()));
    }

    /// What CEL cannot compile, or names a variable that is not there, is
    /// refused when the file is read; an expression that is not a boolean
    /// or fails fails the invariant, saying why.
    #[test]
    fn bad_expressions_are_refused_or_reported() {
        let syntax = Invariant::compile(
            "x",
            "services.cloud.applied.size( ==",
            When::End,
            &kinds(),
            &services(),
        );
        assert!(syntax.unwrap_err().contains("does not compile"));
        let unknown =
            Invariant::compile("x", "size(buckets) == 0", When::End, &kinds(), &services());
        assert!(unknown.unwrap_err().contains("buckets"));
        let number = Invariant::compile(
            "x",
            "size(objects.buckets)",
            When::End,
            &kinds(),
            &services(),
        )
        .unwrap();
        assert!(
            number
                .judge(&world(json!([])))
                .unwrap_err()
                .contains("not a boolean")
        );
        let missing = Invariant::compile(
            "x",
            "objects.buckets[0].status.phase == 'Ready'",
            When::End,
            &kinds(),
            &services(),
        )
        .unwrap();
        assert!(
            missing
                .judge(&world(json!([])))
                .unwrap_err()
                .contains("cannot be evaluated")
        );
    }
}
