//! Key chords such as `Enter` or `Control+A`, dispatched as real key events.

use chromiumoxide::cdp::browser_protocol::input::{DispatchKeyEventParams, DispatchKeyEventType};
use chromiumoxide::Page;

use crate::outcome::{ActResult, ActionFailure};

/// Presses a chord on a page.
pub(crate) trait PressChord {
    async fn press_key_chord(&self, chord: &str) -> ActResult<()>;
}

impl PressChord for Page {
    async fn press_key_chord(&self, chord: &str) -> ActResult<()> {
        let (modifiers, key) = parse_chord(chord)?;
        let def = chromiumoxide::keys::get_key_definition(key)
            .ok_or_else(|| ActionFailure::invalid(format!("payload: unknown key `{key}`")))?;
        let mut mask = 0i64;
        for m in &modifiers {
            let mdef = chromiumoxide::keys::get_key_definition(m.name()).expect("modifier keys are in the table");
            mask |= m.bit();
            let mut down = DispatchKeyEventParams::new(DispatchKeyEventType::RawKeyDown);
            down.key = Some(mdef.key.to_string());
            down.code = Some(mdef.code.to_string());
            down.windows_virtual_key_code = Some(mdef.key_code);
            down.modifiers = Some(mask);
            self.execute(down).await.map_err(ActionFailure::cdp)?;
        }
        // Text is produced only without Control/Alt/Meta, as on a real keyboard.
        let text = if mask & !Modifier::Shift.bit() == 0 {
            def.text.map(str::to_string).or_else(|| (def.key.chars().count() == 1).then(|| def.key.to_string()))
        } else {
            None
        };
        let mut down = DispatchKeyEventParams::new(if text.is_some() {
            DispatchKeyEventType::KeyDown
        } else {
            DispatchKeyEventType::RawKeyDown
        });
        down.key = Some(def.key.to_string());
        down.code = Some(def.code.to_string());
        down.windows_virtual_key_code = Some(def.key_code);
        down.native_virtual_key_code = Some(def.key_code);
        down.modifiers = Some(mask);
        down.text = text.clone();
        down.unmodified_text = text;
        let mut up = down.clone();
        up.r#type = DispatchKeyEventType::KeyUp;
        up.text = None;
        up.unmodified_text = None;
        self.execute(down).await.map_err(ActionFailure::cdp)?;
        self.execute(up).await.map_err(ActionFailure::cdp)?;
        for m in modifiers.iter().rev() {
            let mdef = chromiumoxide::keys::get_key_definition(m.name()).expect("modifier keys are in the table");
            mask &= !m.bit();
            let mut up = DispatchKeyEventParams::new(DispatchKeyEventType::KeyUp);
            up.key = Some(mdef.key.to_string());
            up.code = Some(mdef.code.to_string());
            up.windows_virtual_key_code = Some(mdef.key_code);
            up.modifiers = Some(mask);
            self.execute(up).await.map_err(ActionFailure::cdp)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Modifier {
    Alt,
    Control,
    Meta,
    Shift,
}

impl Modifier {
    fn bit(self) -> i64 {
        match self {
            Modifier::Alt => 1,
            Modifier::Control => 2,
            Modifier::Meta => 4,
            Modifier::Shift => 8,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Modifier::Alt => "Alt",
            Modifier::Control => "Control",
            Modifier::Meta => "Meta",
            Modifier::Shift => "Shift",
        }
    }
}

/// Splits `Control+Shift+A` into modifiers and the main key. `+` alone is the plus key.
fn parse_chord(chord: &str) -> ActResult<(Vec<Modifier>, &str)> {
    if chord.is_empty() {
        return Err(ActionFailure::invalid("payload: a key such as `Enter` or `Control+A` is required"));
    }
    if chord == "+" {
        return Ok((Vec::new(), "+"));
    }
    let parts: Vec<&str> = chord.split('+').collect();
    let (key, mods) = parts.split_last().expect("split yields at least one part");
    if key.is_empty() {
        return Err(ActionFailure::invalid(format!("payload: `{chord}` has no key after its modifiers")));
    }
    let mut out = Vec::new();
    for m in mods {
        let m = match m.to_ascii_lowercase().as_str() {
            "alt" => Modifier::Alt,
            "control" | "ctrl" => Modifier::Control,
            "meta" | "cmd" | "command" => Modifier::Meta,
            "shift" => Modifier::Shift,
            _ => {
                return Err(ActionFailure::invalid(format!(
                    "payload: `{m}` is not a modifier (Alt, Control, Meta, Shift)"
                )))
            }
        };
        out.push(m);
    }
    Ok((out, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::FailureCode;

    #[test]
    fn chords_parse() {
        assert_eq!(parse_chord("Enter").unwrap(), (vec![], "Enter"));
        assert_eq!(parse_chord("Control+A").unwrap(), (vec![Modifier::Control], "A"));
        assert_eq!(parse_chord("ctrl+Shift+z").unwrap(), (vec![Modifier::Control, Modifier::Shift], "z"));
        assert_eq!(parse_chord("+").unwrap(), (vec![], "+"));
        assert_eq!(parse_chord("Hyper+A").unwrap_err().code, FailureCode::InvalidArgument);
        assert_eq!(parse_chord("Control+").unwrap_err().code, FailureCode::InvalidArgument);
        assert_eq!(parse_chord("").unwrap_err().code, FailureCode::InvalidArgument);
    }
}
