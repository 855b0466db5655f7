fn main() {
    let env: infera_exec::Env = std::env::vars_os().collect();
    let code = infera_exec::run(std::env::args_os().collect(), env);
    std::process::exit(code);
}
