fn main() {
    print!("{}", evictord::api::crds_yaml().unwrap());
}
