//! Arbitrary device-profile files: decoding returns a profile or a typed
//! error, never panics, and a profile it accepts survives a round trip.
#![no_main]
use std::path::Path;

use directkv::internals::io::profile::DeviceProfile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("/p/device-profile.json");
    if let Ok(profile) = DeviceProfile::decode(data, path) {
        let again = serde_json::to_vec(&profile).expect("a decoded profile encodes");
        let back = DeviceProfile::decode(&again, path).expect("an encoded profile decodes");
        assert_eq!(back, profile);
    }
});
