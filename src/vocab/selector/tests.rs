use super::*;
use crate::vocab::label::check_dns_subdomain;

fn parse(s: &str) -> LabelSelector {
    match s.parse() {
        Ok(selector) => selector,
        Err(e) => panic!("{s:?} should parse: {e}"),
    }
}

fn error(s: &str) -> String {
    match s.parse::<LabelSelector>() {
        Ok(selector) => panic!("{s:?} should fail, parsed as {selector}"),
        Err(e) => e.to_string(),
    }
}

fn key(k: &str) -> String {
    k.to_owned()
}

#[test]
fn every_operator_parses() {
    let selector = parse("a=1,b==2,c!=3,d,!e,f in (x,y),g notin (z)");
    assert_eq!(
        selector.requirements(),
        &[
            Requirement::Equals {
                key: key("a"),
                value: key("1")
            },
            Requirement::Equals {
                key: key("b"),
                value: key("2")
            },
            Requirement::NotEquals {
                key: key("c"),
                value: key("3")
            },
            Requirement::Exists { key: key("d") },
            Requirement::NotExists { key: key("e") },
            Requirement::In {
                key: key("f"),
                values: vec![key("x"), key("y")]
            },
            Requirement::NotIn {
                key: key("g"),
                values: vec![key("z")]
            },
        ]
    );
}

#[test]
fn display_is_canonical_and_round_trips() {
    let selector = parse("  a == 1 , c != 3,d , ! e ,f in( x , y ),g notin (z)  ");
    let canonical = selector.to_string();
    assert_eq!(canonical, "a=1,c!=3,d,!e,f in (x,y),g notin (z)");
    assert_eq!(parse(&canonical), selector);
}

#[test]
fn default_selector_and_prefixed_keys() {
    let selector = parse("kops.k8s.io/instance-role=Node");
    assert_eq!(selector.to_string(), "kops.k8s.io/instance-role=Node");
    parse("hetzner.cloud/x=y");
    parse("a.b-c.d/N_a.m-e=V_a.l-u.e");
}

#[test]
fn empty_value_is_allowed_after_equals() {
    assert_eq!(parse("a=").to_string(), "a=");
    assert_eq!(parse("a=,b").to_string(), "a=,b");
}

#[test]
fn empty_selector_is_refused_and_says_why() {
    for input in ["", "   ", "\n\t"] {
        let message = error(input);
        assert!(message.contains("every server"), "{message}");
    }
}

#[test]
fn empty_name_after_prefix() {
    assert_eq!(
        error("kops.k8s.io/=Node"),
        "label key \"kops.k8s.io/\" at position 1 has an empty name after the prefix"
    );
}

#[test]
fn unexpected_parenthesis_names_position_and_choices() {
    assert_eq!(
        error("role (a,b)"),
        "unexpected \"(\" at position 6; expected \",\", \"=\", \"==\", \"!=\", \"in\" or \"notin\""
    );
    assert_eq!(
        error("a=1,role (a)"),
        "unexpected \"(\" at position 10; expected \",\", \"=\", \"==\", \"!=\", \"in\" or \"notin\""
    );
}

#[test]
fn value_with_space_is_one_bad_value() {
    let message = error("a=a b");
    assert!(
        message.starts_with("value \"a b\" at position 3 contains \" \" (character 2)"),
        "{message}"
    );
}

#[test]
fn unknown_operator_word() {
    assert_eq!(
        error("a is (b)"),
        "unexpected \"is\" at position 3; expected \",\", \"=\", \"==\", \"!=\", \"in\" or \"notin\""
    );
}

#[test]
fn structural_errors() {
    assert!(error("a in (b,c").contains("\"(\" at position 6 is never closed"));
    assert!(error("a in b").contains("expected \"(\""));
    assert!(error("a in").contains("ends too early"));
    assert!(error("a in ()").contains("value list for \"a\" at position 6 is empty"));
    assert!(error("a in ( )").contains("is empty"));
    assert!(error("a in (b,,c)").contains("empty value at position 9"));
    assert!(error("a in (b,)").contains("empty value"));
    assert!(error("a,").contains("expected another requirement"));
    assert!(error("a,,b").contains("unexpected \",\" at position 3"));
    assert!(error(",a").contains("unexpected \",\" at position 1; expected a label key"));
    assert!(error("=a").contains("unexpected \"=\" at position 1"));
    assert!(error("!").contains("expected a label key after \"!\""));
    assert!(error("!a=b").contains("unexpected \"=\" at position 3; expected \",\" or the end"));
    assert!(error("a in (b) cd").contains("unexpected \"cd\" at position 10"));
    assert!(error("a!b").contains("unexpected \"!\" at position 2"));
    assert!(error("a)").contains("unexpected \")\" at position 2"));
    assert!(error("a=b)").contains("value \"b)\""));
    assert!(error("a in (b(c))").contains("value \"b(c\""));
}

#[test]
fn key_rules() {
    assert!(error("/a").contains("empty prefix"));
    assert!(error("a/b/c").contains("more than one \"/\""));
    assert!(error("Kops.io/a").contains("\"K\" (character 1), which the prefix may not contain"));
    assert!(error("a..b/c").contains("empty part between dots"));
    assert!(error("-a.b/c").contains("must start and end each dot-separated part of its prefix"));
    assert!(error("_a").contains("must start and end its name with a letter or digit"));
    assert!(error(&"k".repeat(64)).contains("64 characters, at most 63"));
    parse(&"k".repeat(63));
    let a63 = "a".repeat(63);
    let ok_prefix = format!("{a63}.{a63}.{a63}.{}/a", "a".repeat(61));
    assert_eq!(ok_prefix.len(), 253 + 2);
    parse(&ok_prefix);
    let long_prefix = format!("{a63}.{a63}.{a63}.{}/a", "a".repeat(62));
    assert!(error(&long_prefix).contains("254 characters, at most 253"));
}

#[test]
fn value_rules() {
    assert!(error("a=-b").ends_with("at position 3 must start and end with a letter or digit"));
    assert!(error(&format!("a={}", "v".repeat(64))).contains("at most 63"));
    parse(&format!("a={}", "v".repeat(63)));
    assert!(error("a=ü").contains("\"ü\" (character 1)"));
}

#[test]
fn odd_input_never_panics_and_errors_stay_short() {
    let long = "x".repeat(100_000);
    let inputs = [
        "(((((".to_owned(),
        ")))))".to_owned(),
        "a in ((((".to_owned(),
        "a in (b))".to_owned(),
        "🦀=🦀".to_owned(),
        "ключ=значение".to_owned(),
        "a=\u{0}".to_owned(),
        "a\u{200b}=b".to_owned(),
        "\u{feff}a=b".to_owned(),
        "!!a".to_owned(),
        "a!==b".to_owned(),
        "a===b".to_owned(),
        "a in (b) notin (c)".to_owned(),
        "notin".to_owned(),
        "in in (in)".to_owned(),
        long.clone(),
        format!("a={long}"),
        format!("a in ({long}"),
        "a,".repeat(50_000),
        "é".repeat(1000),
    ];
    for input in &inputs {
        if let Err(e) = input.parse::<LabelSelector>() {
            assert!(e.to_string().len() < 400, "{e}");
        }
    }
    // Every prefix of a tricky string, cut at each character boundary.
    let tricky = "a.b/c-d in ( x , y ),!e,f!=g,h==i,ü(),";
    for (i, _) in tricky.char_indices() {
        let _ = tricky[..i].parse::<LabelSelector>();
    }
}

#[test]
fn random_input_never_panics_and_accepted_input_round_trips() {
    const ALPHABET: &[char] = &[
        'a', 'b', 'Z', '0', '9', '-', '_', '.', '/', '=', '!', ',', '(', ')', ' ', '\t', 'i', 'n',
        'o', 't', 'é', '🦀', '\u{0}',
    ];
    // A fixed xorshift so failures reproduce; no dependency needed.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = (next() % 24) as usize;
        let input: String = (0..len)
            .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
            .collect();
        if let Ok(selector) = input.parse::<LabelSelector>() {
            accepted += 1;
            let canonical = selector.to_string();
            assert_eq!(
                canonical.parse::<LabelSelector>().as_ref(),
                Ok(&selector),
                "{input:?}"
            );
            let _ = selector.to_kubernetes();
        }
    }
    assert!(
        accepted > 100,
        "the generator should hit valid selectors too ({accepted})"
    );
}

#[test]
fn keywords_are_keys_where_a_key_is_expected() {
    assert_eq!(parse("in in (in)").to_string(), "in in (in)");
    assert_eq!(parse("notin").to_string(), "notin");
}

#[test]
fn duplicate_list_values_are_dropped() {
    assert_eq!(parse("a in (x,y,x)").to_string(), "a in (x,y)");
}

#[test]
fn kubernetes_form() {
    let k = parse("a=1,b!=2,c,!d,e in (x,y),f notin (z)").to_kubernetes();
    let labels = k.match_labels.expect("matchLabels");
    assert_eq!(labels.len(), 1);
    assert_eq!(labels.get("a").map(String::as_str), Some("1"));
    let expressions: Vec<(String, String, Option<Vec<String>>)> = k
        .match_expressions
        .expect("matchExpressions")
        .into_iter()
        .map(|e| (e.key, e.operator, e.values))
        .collect();
    assert_eq!(
        expressions,
        vec![
            (key("b"), key("NotIn"), Some(vec![key("2")])),
            (key("c"), key("Exists"), None),
            (key("d"), key("DoesNotExist"), None),
            (key("e"), key("In"), Some(vec![key("x"), key("y")])),
            (key("f"), key("NotIn"), Some(vec![key("z")])),
        ]
    );
}

#[test]
fn kubernetes_form_of_equalities_only_has_no_expressions() {
    let k = parse("a=1,a=1").to_kubernetes();
    assert!(k.match_expressions.is_none());
    let k = parse("a=1,a=2").to_kubernetes();
    assert_eq!(k.match_expressions.map(|e| e.len()), Some(1));
    let k = parse("a").to_kubernetes();
    assert!(k.match_labels.is_none());
}

#[test]
fn matches_with_kubernetes_semantics() {
    let labels: BTreeMap<String, String> = [("role", "worker"), ("env", "prod")]
        .into_iter()
        .map(|(k, v)| (key(k), key(v)))
        .collect();
    assert!(parse("role=worker,env in (prod,dev),!draining").matches(&labels));
    assert!(parse("zone!=a,zone notin (b)").matches(&labels));
    assert!(!parse("role=worker,draining").matches(&labels));
    assert!(!parse("env notin (prod)").matches(&labels));
}

#[test]
fn new_validates_like_parse() {
    assert_eq!(LabelSelector::new(vec![]), Err(SelectorError::Empty));
    assert!(LabelSelector::new(vec![Requirement::Exists { key: key("a b") }]).is_err());
    assert!(LabelSelector::new(vec![Requirement::In {
        key: key("a"),
        values: vec![]
    }])
    .is_err());
    assert!(LabelSelector::new(vec![Requirement::Equals {
        key: key("a"),
        value: key("b c")
    }])
    .is_err());
    let ok = LabelSelector::new(vec![Requirement::Equals {
        key: key("a"),
        value: key("b"),
    }]);
    assert_eq!(ok.map(|s| s.to_string()).ok(), Some(key("a=b")));
}

#[test]
fn serde_uses_the_canonical_string() {
    let selector = parse("a in (x, y)");
    assert_eq!(
        serde_json::to_string(&selector).ok(),
        Some("\"a in (x,y)\"".to_owned())
    );
    let back: Result<LabelSelector, _> = serde_json::from_str("\"a in (x,y)\"");
    assert_eq!(back.ok(), Some(selector));
    assert!(serde_json::from_str::<LabelSelector>("\"\"").is_err());
}

#[test]
fn dns_subdomain() {
    assert!(check_dns_subdomain("covidnetes-pool").is_ok());
    assert!(check_dns_subdomain("a.b").is_ok());
    assert!(check_dns_subdomain("").is_err());
    assert!(check_dns_subdomain("Pool").is_err());
    assert!(check_dns_subdomain("pool-").is_err());
    assert!(check_dns_subdomain(&"a".repeat(254)).is_err());
}
