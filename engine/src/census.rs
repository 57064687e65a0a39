//! A count of what a state holds, per field: how many entries every map and list at each field
//! path has, summed over every instance of that path (every MHC's targets count together).
//! Tests that bound the engine's memory over a long run read it to name the field that grows;
//! it walks the state as its encoding does, so a field added later is counted without new code.

use serde::Serialize;
use serde::ser;
use std::collections::BTreeMap;
use std::fmt;

/// Entries per field path (`store.indexes.tombstones`, `controllers.health.mhcs[].targets`):
/// maps and lists only, `[]` standing for their members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census(pub BTreeMap<String, usize>);

impl Census {
    /// The census of `value` (any state that encodes).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Census {
        let mut census = Census::default();
        value
            .serialize(Walker {
                census: &mut census,
                path: String::new(),
            })
            .expect("a state that encodes can be walked");
        census
    }

    /// The entries at `path` (0 where there were none).
    pub fn entries(&self, path: &str) -> usize {
        self.0.get(path).copied().unwrap_or(0)
    }
}

#[derive(Debug)]
pub struct Unwalkable(String);

impl fmt::Display for Unwalkable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unwalkable {}

impl ser::Error for Unwalkable {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Unwalkable(msg.to_string())
    }
}

/// Walks one value at `path`.
struct Walker<'c> {
    census: &'c mut Census,
    path: String,
}

/// Walks the members of a map, list or struct at `path`.
struct Members<'c> {
    census: &'c mut Census,
    path: String,
}

impl Members<'_> {
    fn at(&mut self, path: String) -> Walker<'_> {
        Walker {
            census: self.census,
            path,
        }
    }

    /// A member of a map or list: counted, then walked at `<path>[]`.
    fn member<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        *self.census.0.entry(self.path.clone()).or_default() += 1;
        let path = format!("{}[]", self.path);
        value.serialize(self.at(path))
    }

    /// A part of a tuple or an enum variant: walked at the same path, not counted.
    fn part<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        let path = self.path.clone();
        value.serialize(self.at(path))
    }

    fn field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Unwalkable> {
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        };
        value.serialize(self.at(path))
    }
}

impl<'c> Walker<'c> {
    fn members(self) -> Members<'c> {
        Members {
            census: self.census,
            path: self.path,
        }
    }
}

macro_rules! leaves {
    ($($method:ident($t:ty)),* $(,)?) => {
        $(fn $method(self, _: $t) -> Result<(), Unwalkable> { Ok(()) })*
    };
}

impl<'c> ser::Serializer for Walker<'c> {
    type Ok = ();
    type Error = Unwalkable;
    type SerializeSeq = Members<'c>;
    type SerializeTuple = Members<'c>;
    type SerializeTupleStruct = Members<'c>;
    type SerializeTupleVariant = Members<'c>;
    type SerializeMap = Members<'c>;
    type SerializeStruct = Members<'c>;
    type SerializeStructVariant = Members<'c>;

    leaves!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str),
    );

    fn serialize_none(self) -> Result<(), Unwalkable> {
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unwalkable> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Unwalkable> {
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), Unwalkable> {
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unwalkable> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unwalkable> {
        value.serialize(self)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Members<'c>, Unwalkable> {
        self.census.0.entry(self.path.clone()).or_default();
        Ok(self.members())
    }

    fn serialize_tuple(self, _: usize) -> Result<Members<'c>, Unwalkable> {
        Ok(self.members())
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Members<'c>, Unwalkable> {
        Ok(self.members())
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Members<'c>, Unwalkable> {
        Ok(self.members())
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Members<'c>, Unwalkable> {
        self.census.0.entry(self.path.clone()).or_default();
        Ok(self.members())
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Members<'c>, Unwalkable> {
        Ok(self.members())
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Members<'c>, Unwalkable> {
        Ok(self.members())
    }
}

impl ser::SerializeSeq for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        self.member(value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeTuple for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        self.part(value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        self.part(value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        self.part(value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeMap for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    /// A key is counted with its value: keys are small (an object's key, a name).
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), Unwalkable> {
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unwalkable> {
        self.member(value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeStruct for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Unwalkable> {
        self.field(name, value)
    }
    fn skip_field(&mut self, _: &'static str) -> Result<(), Unwalkable> {
        Ok(())
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Members<'_> {
    type Ok = ();
    type Error = Unwalkable;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Unwalkable> {
        self.field(name, value)
    }
    fn end(self) -> Result<(), Unwalkable> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[derive(Serialize)]
    struct Inner {
        names: BTreeSet<String>,
    }

    #[derive(Serialize)]
    struct Outer {
        by_key: BTreeMap<(u8, String), Inner>,
        list: Vec<u32>,
        pair: (Vec<u8>, u8),
        none: Option<Vec<u8>>,
    }

    #[test]
    fn counts_the_members_of_every_map_and_list_by_field_path() {
        let inner = |names: &[&str]| Inner {
            names: names.iter().map(|n| n.to_string()).collect(),
        };
        let outer = Outer {
            by_key: BTreeMap::from([
                ((1, "a".into()), inner(&["x", "y"])),
                ((2, "b".into()), inner(&["z"])),
            ]),
            list: vec![1, 2, 3],
            pair: (vec![7], 0),
            none: None,
        };
        let census = Census::of(&outer);
        assert_eq!(
            census.0,
            BTreeMap::from([
                ("by_key".to_string(), 2),
                ("by_key[].names".to_string(), 3),
                ("list".to_string(), 3),
                ("pair".to_string(), 1),
            ])
        );
        assert_eq!(census.entries("none"), 0);
    }
}
